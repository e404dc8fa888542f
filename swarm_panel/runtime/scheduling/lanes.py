"""The lanes: the batch's width, which request each lane holds, the KV that holding costs, and who
gives it up under pressure.

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
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from swarm_panel.runtime.core.request import Request, RequestStatus
from swarm_panel.runtime.reuse.prefix_cache import PrefixCache

if TYPE_CHECKING:
    from swarm_panel.runtime.policies.batching import Policy
    from swarm_panel.runtime.policies.view import SchedulerView


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
