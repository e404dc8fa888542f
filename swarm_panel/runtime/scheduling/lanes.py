"""The lanes and admission into them: the batch's width, which request each lane holds, the KV that
holding costs, who gives it up under pressure, and what may run here, decided once per request.

A lane holds a live request, a finished one riding as padding (a policy that pads finished lanes),
or nothing. The table keeps a map from request id to lane, and charges the KV budget as a request
enters a lane and frees it as the request leaves, so the budget's counter stays live.

The KV budget (`KVBudget`): how many KV tokens the scheduler may hand out. Lanes hold `used`: each
occupied lane's computed tokens and padding rows, plus, on a hybrid model, a fixed recurrent state per
sequence (`state_tokens`). Finished sequences kept resident for prefix reuse hold `cached`, read from
the prefix cache's own counters (a parked one holds none). Every change to what a lane holds goes
through `allocate` and `free`, so a check costs the same however many lanes there are; the table
asserts at the end of each step that `used` equals a fresh recount over its lanes.

Preemption (`pick_victim`), when evicting cached sequences is not enough, while planning or after the
engine ran out of KV before the budget said: a padding lane goes first, since its rows are thrown away;
then the live lane the policy names. The caller decides what the victim loses: a live lane is
recomputed later, unless it is the last one, which nothing would be gained by preempting.

Admission. A request's max_tokens is settled once, when it is admitted (`settle`, called by the engine
core's EngineThread.admit): past what the context and the KV budget leave after the prompt, it is cut
to that, the same on every endpoint; a prompt that alone fills the context is refused. The scheduler
does not check again: what changes later (a lowered budget, a new KV layout) is looked at by whoever
changes it (`unfit_after_change`, runtime.serving.relayout). A config is checked against what the
engine holds (`checked_config`).

Into the lanes. The policy decides whether anyone may enter and orders the queue (runtime.policies.policy.Admission);
`fill_free_lanes` carries it out. An admitted prompt is promised its KV until computed, with one token
of headroom per live lane for its next decode, so admission never lets a step overrun the budget.
Cached prefixes yield first, least recently used first, except the one the request will adopt in place.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import EngineCaps
from swarm_panel.runtime.core.request import Request, RequestStatus
from swarm_panel.runtime.policies.registry import POLICY_NAMES
from swarm_panel.runtime.reuse.prefix_cache import PrefixCache

if TYPE_CHECKING:
    from swarm_panel.runtime.policies.policy import Policy, SchedulerView
    from swarm_panel.runtime.scheduling.prefix_planner import PrefixPlanner


class KVBudget:
    def __init__(self, capacity: int, state_tokens: int, cache: PrefixCache) -> None:
        # What the engine holds; lowered when it ran out before the budget said it would.
        self.capacity = capacity
        # The config's kv_budget; None means all the engine has.
        self.limit: int | None = None
        self.state_tokens = state_tokens
        self.used = 0
        self._cache = cache

    @property
    def total(self) -> int:
        return self.capacity if self.limit is None else min(self.limit, self.capacity)

    @property
    def cached(self) -> int:
        return self._cache.num_tokens + self.state_tokens * self._cache.num_resident

    @property
    def free_tokens(self) -> int:
        return self.total - self.used - self.cached

    def can_admit(self, need: int, promised: int) -> bool:
        """Whether `need` more tokens fit beside what is held and what earlier admissions were promised."""
        return need <= self.free_tokens - promised

    def allocate(self, tokens: int) -> None:
        self.used += tokens

    def free(self, tokens: int) -> None:
        self.used -= tokens


@dataclass(slots=True, eq=False)
class Lane:
    index: int
    request: Request | None = None
    # The request finished but its lane keeps riding the step.
    padding: bool = False
    padding_tokens: int = 0
    # Admission order: which lane is newest when one must give up its KV.
    admitted_seq: int = 0
    # The request has been looked up in the prefix cache since it entered this lane.
    prefix_checked: bool = False
    # Before that lookup: how much of its prompt the cache held when it first waited for the prefill
    # budget (what orders prompts by the work they have left; the lookup itself decides the reuse).
    reusable_hint: int | None = None

    @property
    def kv_tokens(self) -> int:
        return self.request.num_computed_tokens + self.padding_tokens if self.request else 0

    @property
    def is_live(self) -> bool:
        return self.request is not None and not self.padding


class LaneTable:
    def __init__(self, width: int, kv: KVBudget) -> None:
        self._lanes = [Lane(i) for i in range(width)]
        self.kv = kv
        # request_id -> the lane holding it, live or padding.
        self.of: dict[int, Lane] = {}
        self.num_padding = 0
        self._admissions = 0

    def __iter__(self) -> Iterator[Lane]:
        return iter(self._lanes)

    def __len__(self) -> int:
        return len(self._lanes)

    def __getitem__(self, index):
        return self._lanes[index]

    @property
    def num_occupied(self) -> int:
        return len(self.of)

    @property
    def num_running(self) -> int:
        return len(self.of) - self.num_padding

    def live(self) -> list[Lane]:
        return [lane for lane in self._lanes if lane.is_live]

    def resize(self, width: int) -> None:
        """Grows to `width` at once; shrinks only as the lanes beyond it empty."""
        while len(self._lanes) < width:
            self._lanes.append(Lane(len(self._lanes)))
        while len(self._lanes) > width and self._lanes[-1].request is None:
            self._lanes.pop()

    def occupy(self, lane: Lane, request: Request) -> None:
        self._admissions += 1
        lane.request, lane.padding, lane.padding_tokens = request, False, 0
        lane.prefix_checked, lane.reusable_hint = False, None
        lane.admitted_seq = self._admissions
        request.status = RequestStatus.RUNNING
        self.of[request.request_id] = lane
        self.kv.allocate(lane.kv_tokens + self.kv.state_tokens)

    def pad(self, lane: Lane) -> None:
        """The lane's request finished, but the lane keeps riding the steps until its batch ends."""
        lane.padding = True
        self.num_padding += 1

    def vacate(self, lane: Lane) -> Request | None:
        """Empties the lane; returns the request it held."""
        request = lane.request
        if request is not None:
            self.of.pop(request.request_id, None)
            self.kv.free(lane.kv_tokens + self.kv.state_tokens)
            self.num_padding -= lane.padding
        lane.request, lane.padding, lane.padding_tokens = None, False, 0
        return request

    def check(self) -> None:
        """The invariants: the map holds exactly the occupied lanes, and the counters equal a recount."""
        held = occupied = padding = 0
        for lane in self._lanes:
            if lane.request is not None:
                occupied += 1
                padding += lane.padding
                held += lane.kv_tokens + self.kv.state_tokens
                assert self.of.get(lane.request.request_id) is lane, "a lane's request is not in the lane map"
        assert occupied == len(self.of), "the lane map holds a request no lane holds"
        assert padding == self.num_padding, f"{self.num_padding} padding lanes counted, {padding} found"
        assert held == self.kv.used, f"KV counter {self.kv.used} differs from a recount of {held}"


def pick_victim(lanes: Sequence[Lane], policy: Policy, view: SchedulerView) -> tuple[Lane | None, int]:
    """The lane to give up its KV (None when no lane holds any), and how many lanes are live."""
    for lane in lanes:
        if lane.padding:
            return lane, sum(1 for other in lanes if other.is_live)
    live = [lane for lane in lanes if lane.is_live]
    return (policy.preemption_victim(view, live) if live else None), len(live)


# ----- admission -----

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
