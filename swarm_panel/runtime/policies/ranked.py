"""Continuous batching with an order over requests: the shared mechanics of the agent-aware policies.

Each agent-aware policy ranks a request (lower goes first); this base applies the rank at the
three places a step is contended: which waiting request takes a free lane, which prompt gets the
prefill budget first, and, when the KV left cannot carry every lane's next token, which lanes
compute (the rest pause for the step with their KV resident). Every lane that can compute does: the
policies stay work-conserving. Only when no lane at all can take its next token does one give up
its KV, the lowest-ranked, to be recomputed later.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from swarm_panel.runtime.policies.policy import IN_QUEUE_ORDER, Admission, ContinuousPolicy, Lane, SchedulerView

if TYPE_CHECKING:
    from swarm_panel.runtime.core.request import Request


class RankedPolicy(ContinuousPolicy):
    family = "agent"
    pauses_lanes = True

    def rank(self, view: SchedulerView, request: Request) -> Any:
        raise NotImplementedError

    def queue_order(self, view: SchedulerView, waiting: list[Request]) -> list[Request]:
        """Waiting requests in admission order; sorting is stable, so equal ranks stay first come first served."""
        return sorted(waiting, key=lambda r: self.rank(view, r))

    def admit(self, view: SchedulerView, now: float) -> Admission:
        if view.num_waiting and view.has_free_lane:
            return Admission(enter=True, order=self.queue_order(view, view.waiting()))
        return IN_QUEUE_ORDER

    def lanes_to_run(self, view: SchedulerView, lanes: list[Lane], n: int) -> list[Lane]:
        chosen = set(sorted(lanes, key=lambda lane: (self.rank(view, lane.request), lane.admitted_seq))[:n])
        return [lane for lane in lanes if lane in chosen]

    def prefill_order(self, view: SchedulerView, lanes: list[Lane]) -> list[Lane]:
        return sorted(lanes, key=lambda lane: self.rank(view, lane.request))

    def preemption_victim(self, view: SchedulerView, live: list[Lane]) -> Lane:
        return max(live, key=lambda lane: (self.rank(view, lane.request), lane.admitted_seq))
