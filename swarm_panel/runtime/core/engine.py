"""The one-call-per-step contract between the scheduler and whatever computes the step, and the clocks
the loop that drives it runs by (`VirtualClock` for benchmarks and tests, `RealClock` for serving)."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from swarm_panel.runtime.core.request import Request

if TYPE_CHECKING:
    from swarm_panel.runtime.core.checkpoints import CheckpointStore
    from swarm_panel.runtime.reuse.saved_states import ParkedSequences, PrefixStore, StoredPrefix


class RowKind(enum.IntEnum):
    DECODE = 0
    PREFILL = 1
    # A finished lane that a naive static batch keeps computing; its output is thrown away.
    PADDING = 2


@dataclass(slots=True)
class Row:
    """One sequence's share of a step: tokens fed at consecutive positions from `start`."""

    request: Request
    kind: RowKind
    start: int
    # For DECODE and PREFILL these are request.token_ids[start:start+len]; PADDING repeats a token.
    tokens: list[int]
    # Sample a token from the last position (decode rows and the chunk that ends a prompt).
    sample: bool
    # Keep a checkpoint of the sequence's recurrent state after this row (engines with `checkpoints`).
    checkpoint: bool = False
    # Keep one of the state before this row, at `start` (a boundary just past it made no cut of its own).
    checkpoint_start: bool = False
    # Keep the sequence's whole state after this row as a stored prefix (engines with `prefix_store`).
    store_prefix: bool = False


class PrefixOpKind(enum.IntEnum):
    # A finished request's sequence stays resident as a cached prefix, trimmed to num_tokens.
    CACHE = 0
    # `dest` takes over the cached sequence of `source` in place, keeping its first num_tokens.
    ADOPT = 1
    # `dest` starts as a new sequence sharing the first num_tokens of `source` (live or cached).
    COPY = 2
    # The cached sequence of `source` leaves its KV cells and sequence id for host RAM (runtime.reuse.saved_states),
    # where a later ADOPT or COPY finds it; an engine that cannot keep it refuses the op.
    PARK = 3
    # `dest` starts from a stored prefix (runtime.reuse.saved_states), the op's `source`: its whole state
    # restored into dest's sequence, then cut back to num_tokens. The stored prefix stays for the next use.
    RESTORE = 4


@dataclass(slots=True)
class PrefixOp:
    """One move of KV between sequences, named by the requests that own them (handles)."""

    kind: PrefixOpKind
    # The request whose sequence holds the KV: a finished request for a cached prefix, else a live one;
    # for RESTORE, the stored prefix.
    source: Request | StoredPrefix
    # The request that receives it (None for CACHE); its first row starts at num_tokens.
    dest: Request | None
    num_tokens: int


@dataclass(slots=True)
class StepPlan:
    rows: list[Row] = field(default_factory=list)
    # Sequences whose KV the engine drops before computing this step (live or cached).
    release: list[Request] = field(default_factory=list)
    # Applied in order after the releases and before the batch; a source is never released in the same plan.
    prefix_ops: list[PrefixOp] = field(default_factory=list)
    # Host work the engine may run while the device computes this step (an engine whose compute returns
    # before its outputs are ready calls it then, once; any other leaves it to the caller, who runs it after).
    while_computing: Callable[[], None] | None = None

    @property
    def num_tokens(self) -> int:
        return sum(len(r.tokens) for r in self.rows)


@dataclass(slots=True)
class Sample:
    """One sampled token. The engine sets `token` and `end`; runtime.serving.detokenize fills in the rest."""

    token: int
    # The token is one of the vocabulary's end-of-generation tokens: it ends the output and adds no text.
    end: bool = False
    # Text this token adds to the output, after stop-string hold-back; may be "" while held.
    text: str = ""
    # The output ends here on an end-of-generation token or a completed stop string.
    stop: bool = False


@dataclass(slots=True)
class StepResult:
    # Keyed by request_id, one for every row with sample=True that succeeded.
    samples: dict[int, Sample]
    duration_s: float
    # request_id -> message, for rows the engine could not compute; those requests fail.
    errors: dict[int, str] = field(default_factory=dict)
    # request_id -> why, for prefix ops the memory could not do. A destination starts over from
    # position 0 (its row this step was not computed); a cached source holds nothing any more.
    refused: dict[int, str] = field(default_factory=dict)
    # Where the step's time went inside the engine (runtime.serving.metrics.StepAccount): wall and this thread's CPU
    # seconds in the device's compute (the call until its outputs are ready, their copy to the host
    # included), and in sampling; and the bytes of logits the device copied to the host for it.
    device_s: float = 0.0
    device_cpu_s: float = 0.0
    sample_s: float = 0.0
    sample_cpu_s: float = 0.0
    logits_bytes: int = 0
    # Host work of the caller's (StepPlan.while_computing) done while the device still computed this step.
    overlapped_s: float = 0.0


@dataclass(slots=True, frozen=True)
class EngineCaps:
    """What an engine can hold and do, published as `engine.caps`; the scheduler is sized by it."""

    # Most KV tokens all sequences together may hold.
    kv_capacity: int
    # Longest sequence (prompt plus output) one request may reach.
    max_context: int
    # Most tokens one step may carry (llama.cpp's n_batch).
    max_step_tokens: int = 1 << 30
    # Most live sequences a step may hold (llama.cpp's n_seq_max, less the cached ones).
    max_lanes: int = 256
    # Most finished sequences kept resident beside the live ones for prefix reuse (0: no prefix_ops).
    max_cached_sequences: int = 0
    # Live plus cached sequences held at once, where they share one pool of ids (None: no shared pool).
    max_sequences: int | None = None
    # Whether a prefix can be copied into a new sequence (False: the engine only adopts cached ones).
    copies_prefixes: bool = True
    # A hybrid or recurrent model's checkpoint store: a sequence resumes only at its own end or at a
    # checkpoint held there, and the engine keeps one after every row marked `checkpoint`. None: attention.
    checkpoints: CheckpointStore | None = None
    # A fixed recurrent state per sequence held, in KV-token equivalents, charged to the KV budget.
    sequence_state_tokens: int = 0
    # Tokens that end a chat turn: the first one in a prompt closes a shared system prompt.
    turn_end_tokens: frozenset[int] = frozenset()
    # Host RAM where the engine parks finished sequences out of its KV cells (runtime.reuse.saved_states); None: never.
    parked: ParkedSequences | None = None
    # The engine takes PARK ops: a cached sequence the scheduler evicts for room waits in `parked`
    # instead of being dropped (split KV, where each cached sequence holds a lane's stream and id).
    parks_evicted: bool = False
    # Whole states of long shared heads kept across sessions (runtime.reuse.saved_states): a prompt chunk
    # ending at such a head is marked `store_prefix`, and a prompt starting with one gets a RESTORE op.
    prefix_store: PrefixStore | None = None
    # A step runs as one llama.cpp ubatch only over consecutive sequence ids (split KV): live and
    # cached sequences then stay within the width, so the ids in use are low and gap-free.
    consecutive_ids: bool = False
    # The context one request may reach once the engine `widen`s its layout (split KV that was a
    # default becoming unified), when a request needs more than max_context; 0: it never widens. An
    # engine that widens has `widen(why)`, called between steps with every sequence given up.
    widens_to: int = 0
    # A layout widened so can turn back (`narrow(why)`, likewise between steps) to lanes of this
    # context, once no request needs more; 0: it was not widened.
    narrows_to: int = 0
    # A prompt chunk's cost grows with how deep in its prompt it starts (attention over every token
    # before it, as on a CPU): beside decode rows a deep chunk gets fewer tokens (runtime.scheduling.step).
    attention_bound_prefill: bool = False
    # The compute call returns before its outputs are ready (a GPU's queue): StepPlan.while_computing then
    # overlaps the device's work, and the serving loop plans the next step meanwhile.
    computes_async: bool = False
    # Honours SamplingParams.grammar and .logprobs (the app refuses both on engines without this).
    samples_logits: bool = False
    # What says when the other attention kernel would serve the contexts seen lately better
    # (RelayoutKind.ATTENTION); None: the kernel stays.
    attention: AttentionAdvisor | None = None


class AttentionAdvisor(Protocol):
    """Follows the contexts served and advises the attention kernel (llama.cpu_tuning.followers.AttentionFollower)."""

    current: str

    @property
    def ratio(self) -> float | None: ...

    def observe(self, contexts: Iterable[int], now: float) -> None: ...

    def advice(self, now: float, recompute_tokens: Callable[[], int]) -> str | None: ...

    def switched(self, setting: str, now: float) -> None: ...

    def distinct_tokens(self, sequences: Sequence[Sequence[int]]) -> int: ...


class RelayoutKind(enum.Enum):
    # Split KV that was a default becomes one unified pool, for a request longer than a lane (caps.widens_to).
    WIDEN = "widen"
    # A widened pool turns split again once no request needs more than a lane (caps.narrows_to).
    NARROW = "narrow"
    # The other attention kernel, as caps.attention advises.
    ATTENTION = "attention"


@dataclass(frozen=True, slots=True)
class EngineFacts:
    """What an engine is, for the panel and /v1/models; replaced whole when the engine's layout changes,
    so a reader on another thread sees one layout's facts, never half of two."""

    name: str
    device: str
    # What one request may hold, and the KV cells of all lanes together.
    n_ctx: int
    kv_capacity_tokens: int
    kv_type: str
    memory_kind: str
    note: str | None
    # A subclass's fields left out of the dict when unset, as the dict was before there were types.
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset()

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k not in self.OMIT_WHEN_NONE}

    def recommended(self) -> dict[str, float]:
        """The sampling the model's file recommends (a GGUF's general.sampling.* keys); none unless an
        engine's facts say so."""
        return {}


@dataclass(frozen=True, slots=True)
class EngineFigures:
    """What an engine holds now (checkpoints; the llama engine's parked and stored sequences, threads):
    read when asked, unlike the facts, which change only with the layout. Each engine has its subclass."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def engine_meta(engine: Engine) -> dict[str, Any]:
    """The facts and the figures as one JSON object, the one place they become a dict: /v1/models' meta,
    the panel's engine box and its export."""
    return dict(engine.facts.as_dict(), **engine.figures().as_dict())


class Tokenizer(Protocol):
    """Text and tokens for the HTTP loop's thread: an object apart from the engine's step, so that it
    shares no mutable state with the decoding thread."""

    @property
    def chat_template(self) -> str | None: ...

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]: ...

    def detokenize(self, tokens: list[int]) -> str: ...

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """Renders a chat with the model's own template (tools included) into one prompt string."""
        ...


class EngineLoadError(RuntimeError):
    """An engine could not be built: a missing or corrupt model file, or settings it cannot run with."""


class EngineError(RuntimeError):
    """The engine could not run a step at all; every request in it fails with this message."""


class KVCacheFull(EngineError):
    """The engine found no room for the step's KV; the scheduler preempts and retries."""


class Engine(Protocol):
    name: str
    # What it can hold and do; the first four figures are also plain attributes, for the panel and the CLI.
    caps: EngineCaps
    kv_capacity: int
    max_context: int
    max_step_tokens: int
    max_lanes: int
    # What it is (model, device, layout); the engine's own subclass of EngineFacts.
    facts: EngineFacts
    # Text and tokens for other threads than the engine's.
    tokenizer: Tokenizer

    def step(self, plan: StepPlan) -> StepResult: ...

    def relayout(self, kind: RelayoutKind, why: str, flash_attn: str | None = None) -> None:
        """Between steps only: a new layout (as caps allow), every sequence dropped for the caller to
        recompute. Raises EngineError, with the old layout back, where it cannot be made."""
        ...

    def figures(self) -> EngineFigures:
        """What it holds now (checkpoints, parked sequences...), read on any thread."""
        ...

    def close(self) -> None: ...

    def piece(self, token: int) -> bytes:
        """The bytes one sampled token adds to the output (an end-of-generation token adds none); the
        engine thread's own, beside the step."""
        ...


# ----- time as the engine loop sees it -----


class VirtualClock:
    """Time moves only when a step reports its duration, so a 70-second run takes milliseconds."""

    realtime = False

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    def wait_until(self, t: float) -> None:
        self._now = max(self._now, t)


class RealClock:
    realtime = True

    def now(self) -> float:
        return time.monotonic()

    def advance(self, seconds: float) -> None:
        """Real time has already passed while the engine worked."""

    def wait_until(self, t: float) -> None:
        delay = t - time.monotonic()
        if delay > 0:
            time.sleep(delay)
