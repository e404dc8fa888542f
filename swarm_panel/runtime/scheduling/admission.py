"""Admission: what may run here, decided once per request, and waiting requests into free lanes.

Limits. A request's max_tokens is settled once, when it is admitted (`settle`, called by the engine
core's EngineThread.admit): past what the context and the KV budget leave after the prompt, it is cut
to that, the same on every endpoint; a prompt that alone fills the context is refused. The scheduler
does not check again: what changes later (a lowered budget, a new KV layout) is looked at by whoever
changes it (`unfit_after_change`, runtime.serving.relayout). A config is checked against what the
engine holds (`checked_config`).

Lanes. The policy decides whether anyone may enter and orders the queue (runtime.policies.batching.Admission);
`fill_free_lanes` carries it out. An admitted prompt is promised its KV until computed, with one token
of headroom per live lane for its next decode, so admission never lets a step overrun the budget.
Cached prefixes yield first, least recently used first, except the one the request will adopt in place.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import EngineCaps
from swarm_panel.runtime.core.request import Request
from swarm_panel.runtime.policies.registry import POLICY_NAMES

if TYPE_CHECKING:
    from swarm_panel.runtime.scheduling.lanes import KVBudget, LaneTable
    from swarm_panel.runtime.scheduling.prefix_planner import PrefixPlanner

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
    """A request's max_tokens, settled once against the engine's caps and budget (those it names)."""

    max_tokens: int
    # The engine must widen its KV layout first (split KV that was a default becoming unified).
    widens: bool
    # The request needs more than a lane's share: a widened layout must not narrow under it.
    long: bool
    caps: EngineCaps
    kv_budget: int
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
    why = unfit(num_prompt_tokens, max_tokens, caps, kv_budget)
    widens = why is not None and bool(caps.widens_to)
    if widens:
        why = unfit(num_prompt_tokens, max_tokens, replace(caps, max_context=caps.widens_to), kv_budget)
    if why is not None:
        raise RequestRejected(why)
    return Settled(max_tokens, widens, long=0 < caps.narrows_to < num_prompt_tokens + max_tokens, caps=caps,
                   kv_budget=kv_budget, note=note)


def checked_config(config: SchedulerConfig, caps: EngineCaps) -> SchedulerConfig:
    """The config itself checks its own bounds; this adds the policy's name and what depends on the engine."""
    if config.policy not in POLICY_NAMES:
        raise ValueError(f"unknown policy {config.policy!r}; choose one of {', '.join(POLICY_NAMES)}")
    if config.num_lanes > caps.max_lanes:
        raise ValueError(f"num_lanes {config.num_lanes} exceeds the engine's {caps.max_lanes} lanes")
    return config


def unfit(num_prompt_tokens: int, max_tokens: int, caps: EngineCaps, kv_budget: int) -> str | None:
    """Why a request of this size can never run under these caps and budget; None when it can."""
    total = num_prompt_tokens + max_tokens
    if total > caps.max_context:
        return (f"prompt ({num_prompt_tokens} tokens) plus max_tokens ({max_tokens}) is {total} tokens, "
                f"more than the context of {caps.max_context}")
    state_tokens = caps.sequence_state_tokens
    if total + state_tokens > kv_budget:
        state = f" and a recurrent state worth {state_tokens}" if state_tokens else ""
        return (f"prompt ({num_prompt_tokens} tokens) plus max_tokens ({max_tokens}) needs {total} KV tokens{state}, "
                f"more than the KV budget of {kv_budget}")
    return None


def unfit_after_change(request: Request, caps: EngineCaps, kv_budget: int) -> str | None:
    """Why a request already in the scheduler no longer fits a lowered budget; None when it still does."""
    budget = min(kv_budget, caps.max_context)
    if request.max_total_tokens > budget:
        return f"request needs {request.max_total_tokens} KV tokens, more than the new budget of {budget}"
    return None


def fill_free_lanes(waiting: deque[Request], lanes: LaneTable, kv: KVBudget, prefix: PrefixPlanner,
                    width: int) -> None:
    if not waiting:
        return
    live = lanes.live()
    promised = len(live) + sum(lane.request.num_tokens - lane.request.num_computed_tokens for lane in live)
    state = kv.state_tokens
    for lane in lanes[:width]:
        if not waiting:
            break
        if lane.request is not None:
            continue
        request = waiting[0]
        need = request.num_tokens + 1 + state
        # A resident cached sequence it will adopt moves from kv_cached to kv_used instead of being
        # computed; a parked one comes back from host RAM into cells it needs like any prompt.
        adopt = prefix.adoptable(request)
        if adopt is not None and not adopt.parked:
            need -= adopt.num_tokens + state
        while not kv.can_admit(need, promised) and prefix.evict_one(keep=adopt):
            pass
        if not kv.can_admit(need, promised):
            break
        waiting.popleft()
        lanes.occupy(lane, request)
        # Its state is held from now on; the rest of `need` is a promise until computed.
        promised += need - state
