"""What can ever run here, checked in one place: a config the engine holds, a request its context and budget hold."""

from __future__ import annotations

from dataclasses import dataclass, replace

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import EngineCaps
from swarm_panel.runtime.core.request import Request
from swarm_panel.runtime.policies.registry import POLICY_NAMES

# max_tokens when a request names none (Settings.default_max_tokens), cut to what the context has left.
DEFAULT_MAX_TOKENS = 4096
# A request with no limit takes what its lane has left, down to this much; below it, the layout widens
# and it gets the default from the pool, rather than a reply cut short where the pool has room.
MIN_LANE_DEFAULT = 1024


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
    # Why max_tokens is less than the request asked (or than the default, for one that asked none).
    note: str | None = None


def settle(caps: EngineCaps, kv_budget: int, num_prompt_tokens: int, asked: int | None, *,
           default: int = DEFAULT_MAX_TOKENS) -> Settled:
    """The max_tokens a request runs with, and whether the engine must widen for it; ContextExceeded
    where the prompt alone fills the context.

    Every endpoint cuts the same way, never refusing: a max_tokens past what the context (the whole
    pool, where the layout can widen) and the KV budget have left after the prompt is cut to that,
    with the reason in `note`. A request that asks none gets `default`, from its lane where the lane
    has at least MIN_LANE_DEFAULT left, otherwise from the pool."""
    limit = min(max(caps.max_context, caps.widens_to), kv_budget)
    if limit - num_prompt_tokens < 1:
        raise ContextExceeded(num_prompt_tokens, limit)
    room = max(1, min(limit, kv_budget - caps.sequence_state_tokens) - num_prompt_tokens)
    lane_room = min(caps.narrows_to or caps.max_context, kv_budget) - num_prompt_tokens
    if asked is not None:
        wanted = asked
    elif lane_room >= min(default, MIN_LANE_DEFAULT):
        wanted = min(default, lane_room)
    else:
        wanted = default
    max_tokens = min(wanted, room)
    note = None
    if max_tokens < wanted:
        what = f"max_tokens {asked:,}" if asked is not None else f"the default max_tokens {default:,}"
        note = (f"{what} cut to {max_tokens:,}: the prompt's {num_prompt_tokens:,} tokens leave that much "
                f"of the {min(limit, kv_budget - caps.sequence_state_tokens):,} tokens a request can hold")
    try:
        check_fits(num_prompt_tokens, max_tokens, caps, kv_budget)
        widens = False
    except RequestRejected:
        if not caps.widens_to:
            raise
        check_fits(num_prompt_tokens, max_tokens, replace(caps, max_context=caps.widens_to), kv_budget)
        widens = True
    return Settled(max_tokens, widens, long=0 < caps.narrows_to < num_prompt_tokens + max_tokens, note=note)


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
