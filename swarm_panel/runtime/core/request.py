"""A request's state as the scheduler and engines see it."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

_ids = itertools.count(1)

# OpenAI's limit on top_logprobs.
MAX_TOP_LOGPROBS = 20


class RequestStatus(enum.IntEnum):
    WAITING = 0
    RUNNING = 1
    # Everything from here on is finished; the name after FINISHED_ is the OpenAI finish_reason.
    FINISHED_STOPPED = 2
    FINISHED_LENGTH = 3
    FINISHED_ABORTED = 4
    FINISHED_ERROR = 5

    @property
    def is_finished(self) -> bool:
        return self >= RequestStatus.FINISHED_STOPPED

    @property
    def finish_reason(self) -> str | None:
        return _FINISH_REASONS.get(self)


_FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
    RequestStatus.FINISHED_ERROR: "error",
}


@dataclass(slots=True)
class SamplingParams:
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_penalty: float = 1.0
    stop: list[str] = field(default_factory=list)
    # Benchmarks need exact output lengths from random-weight models.
    ignore_eos: bool = False
    # A GBNF grammar (root rule "root") every sampled token must keep valid; None: unconstrained.
    grammar: str | None = None
    # Record each sampled token's log-probability and this many top alternatives; None: record nothing.
    logprobs: int | None = None

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"temperature must be within 0..2, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be within (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must not be negative, got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be within 0..1, got {self.min_p}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top logprobs must be within 0..{MAX_TOP_LOGPROBS}, got {self.logprobs}")
        if self.grammar is not None and self.ignore_eos:
            raise ValueError("ignore_eos cannot be combined with constrained output: a finished grammar allows only end-of-generation")


@dataclass(slots=True, frozen=True)
class TokenLogprob:
    """One sampled token's log-probability under the model (before sampling filters) and its top rivals."""

    token: int
    piece: bytes
    logprob: float
    # (token, piece, logprob), most likely first.
    top: tuple[tuple[int, bytes, float], ...] = ()
    # An end-of-generation token: it ends the output but adds no text.
    end: bool = False


@dataclass(slots=True)
class RequestOutput:
    """What one step produced for one request: the delta a client streams."""

    request_id: int
    token_ids: list[int]
    text: str
    finished: bool
    finish_reason: str | None = None
    error: str | None = None


@dataclass(slots=True, eq=False)
class Request:
    prompt_token_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    agent: str = "anonymous"
    request_id: int = field(default_factory=lambda: next(_ids))
    # Prompt then outputs; a preempted request recomputes all of them.
    token_ids: list[int] = field(init=False)
    num_prompt_tokens: int = field(init=False)
    num_computed_tokens: int = 0
    # Prompt tokens whose KV came from the prefix cache instead of being computed.
    num_cached_tokens: int = 0
    status: RequestStatus = RequestStatus.WAITING
    error: str | None = None
    output_text_parts: list[str] = field(default_factory=list)
    arrival_time: float = 0.0
    first_token_time: float | None = None
    last_token_time: float | None = None
    finished_time: float | None = None
    num_preemptions: int = 0
    # Filled by the engine as it samples, one per output token, when sampling.logprobs is set.
    output_logprobs: list[TokenLogprob] = field(default_factory=list)
    # The stop string that ended the output, if one did.
    stop_sequence: str | None = None
    # Called on the engine thread after every step that gave this request something.
    listener: Callable[[RequestOutput], None] | None = None
    # Prompt positions worth a recurrent-state checkpoint on hybrid models (the end of a shared system
    # prompt), so other requests can resume there; the scheduler adds the end of the prompt itself.
    checkpoint_positions: tuple[int, ...] = ()
    # Overrides the agent's priority under the priority policy (lower is served first, as vLLM's
    # `priority`); None: the agent's own, from the scheduler config.
    priority: int | None = None

    def __post_init__(self) -> None:
        if not self.prompt_token_ids:
            raise ValueError("a request needs at least one prompt token")
        self.token_ids = list(self.prompt_token_ids)
        self.num_prompt_tokens = len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def output_text(self) -> str:
        return "".join(self.output_text_parts)

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

    @property
    def finish_reason(self) -> str | None:
        return self.status.finish_reason

    @property
    def is_decoding(self) -> bool:
        """Every token but the newest sampled one is in KV; a one-token row feeds that one."""
        return self.num_output_tokens > 0 and self.num_computed_tokens == self.num_tokens - 1

    @property
    def max_total_tokens(self) -> int:
        return self.num_prompt_tokens + self.sampling.max_tokens


def reaches_length(request: Request, max_context: int, new_tokens: int = 1) -> bool:
    """After `new_tokens` more output tokens, the request has all it may have: max_tokens or the context."""
    return (request.num_output_tokens + new_tokens >= request.sampling.max_tokens
            or request.num_tokens + new_tokens >= max_context)
