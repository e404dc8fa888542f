"""What can ever run here, checked in one place: a config the engine holds, a request its context and budget hold."""

from __future__ import annotations

from dataclasses import dataclass, replace

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import EngineCaps
from swarm_panel.runtime.core.request import Request
from swarm_panel.runtime.policies.registry import POLICY_NAMES

# max_tokens when a request names none: the rest of the context, but no more than this.
DEFAULT_MAX_TOKENS = 4096


class RequestRejected(ValueError):
    """The request can never run here (it would not fit the context or the KV budget)."""


class ContextExceeded(RequestRejected):
    """The prompt alone leaves the context no room for a single output token."""

    def __init__(self, num_prompt_tokens: int, limit: int) -> None:
        super().__init__(f"the prompt is {num_prompt_tokens} tokens; the context holds {limit}")
        self.limit = limit


@dataclass(frozen=True, slots=True)
class Settled:
    """A request's max_tokens, settled once against the engine's caps and budget."""

    max_tokens: int
    # The engine must widen its KV layout first (split KV that was a default becoming unified).
    widens: bool
    # The request needs more than a lane's share: a widened layout must not narrow under it.
    long: bool


def settle(caps: EngineCaps, kv_budget: int, num_prompt_tokens: int, asked: int | None, *,
           cut: bool = False, default: int = DEFAULT_MAX_TOKENS) -> Settled:
    """The max_tokens a request runs with, and whether the engine must widen for it; RequestRejected
    (ContextExceeded for a prompt that alone fills the context) where it can never run.

    A max_tokens the server chooses (none asked, or one `cut` to what is left) keeps to a lane's
    context where the prompt fits one: only a request that needs more (its prompt, or a max_tokens
    asked for) widens the layout, or keeps a widened one from narrowing."""
    limit = min(max(caps.max_context, caps.widens_to), kv_budget)
    if limit - num_prompt_tokens < 1:
        raise ContextExceeded(num_prompt_tokens, limit)
    lane = caps.narrows_to or caps.max_context
    context = lane if num_prompt_tokens < min(lane, kv_budget) else limit
    max_tokens = asked or min(default, min(context, kv_budget) - num_prompt_tokens)
    if cut:
        held = kv_budget - num_prompt_tokens - caps.sequence_state_tokens
        max_tokens = max(1, min(max_tokens, context - num_prompt_tokens, held))
    total = num_prompt_tokens + max_tokens
    try:
        check_fits(num_prompt_tokens, max_tokens, caps, kv_budget)
        widens = False
    except RequestRejected:
        if not caps.widens_to:
            raise
        check_fits(num_prompt_tokens, max_tokens, replace(caps, max_context=caps.widens_to), kv_budget)
        widens = True
    return Settled(max_tokens, widens, long=0 < caps.narrows_to < total)


def checked_config(config: SchedulerConfig, caps: EngineCaps) -> SchedulerConfig:
    """The config itself checks its own bounds; this adds the policy's name and what depends on the engine."""
    if config.policy not in POLICY_NAMES:
        raise ValueError(f"unknown policy {config.policy!r}; choose one of {', '.join(POLICY_NAMES)}")
    if config.num_lanes > caps.max_lanes:
        raise ValueError(f"num_lanes {config.num_lanes} exceeds the engine's {caps.max_lanes} lanes")
    return config


def check_fits(num_prompt_tokens: int, max_tokens: int, caps: EngineCaps, kv_budget: int) -> None:
    total = num_prompt_tokens + max_tokens
    if total > caps.max_context:
        raise RequestRejected(
            f"prompt ({num_prompt_tokens} tokens) plus max_tokens ({max_tokens}) is {total} tokens, "
            f"more than the context of {caps.max_context}"
        )
    state_tokens = caps.sequence_state_tokens
    if total + state_tokens > kv_budget:
        state = f" and a recurrent state worth {state_tokens}" if state_tokens else ""
        raise RequestRejected(
            f"prompt ({num_prompt_tokens} tokens) plus max_tokens ({max_tokens}) needs {total} KV tokens{state}, "
            f"more than the KV budget of {kv_budget}"
        )


def unfit_after_change(request: Request, caps: EngineCaps, kv_budget: int) -> str | None:
    """Why a request already in the scheduler no longer fits a lowered budget; None when it still does."""
    budget = min(kv_budget, caps.max_context)
    if request.max_total_tokens > budget:
        return f"request needs {request.max_total_tokens} KV tokens, more than the new budget of {budget}"
    return None
