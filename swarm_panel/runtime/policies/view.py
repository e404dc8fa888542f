"""What a policy may read of the scheduler: its queue, its lanes' occupancy, its knobs and the agents' service.

A policy decides from this view and returns its decision; it never changes the scheduler itself.
The view reads the scheduler live, so one is built per scheduler, not per step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.request import Request


class Lane(Protocol):
    """What a policy reads of one lane (scheduling.lanes.Lane): policies sit below the scheduler."""

    request: Request | None
    admitted_seq: int
    prefix_checked: bool
    reusable_hint: int | None


class _AgentService(Protocol):
    attained: dict[str, float]
    virtual: dict[str, float]


class Scheduler(Protocol):
    """What the view reads of scheduling.scheduler.Scheduler."""

    config: SchedulerConfig
    waiting: Sequence[Request]
    lanes: Sequence[Lane]
    service: _AgentService

    @property
    def num_occupied_lanes(self) -> int: ...

    @property
    def num_running(self) -> int: ...


class SchedulerView:
    __slots__ = ("_sched",)

    def __init__(self, sched: Scheduler) -> None:
        self._sched = sched

    @property
    def config(self) -> SchedulerConfig:
        return self._sched.config

    @property
    def num_waiting(self) -> int:
        return len(self._sched.waiting)

    def waiting(self) -> list[Request]:
        """The queue in its present order, as a copy."""
        return list(self._sched.waiting)

    @property
    def oldest_arrival(self) -> float | None:
        """When the request at the head of the queue arrived; None when nothing waits."""
        waiting = self._sched.waiting
        return waiting[0].arrival_time if waiting else None

    @property
    def num_occupied_lanes(self) -> int:
        return self._sched.num_occupied_lanes

    @property
    def num_running(self) -> int:
        return self._sched.num_running

    def prompt_left(self, lane: Lane) -> int:
        """Prompt tokens the lane's request has still to compute; before its prefix lookup, less what
        the cache held of it when it first waited for the prefill budget."""
        request = lane.request
        computed = request.num_computed_tokens
        if not lane.prefix_checked and lane.reusable_hint is not None:
            computed = max(computed, lane.reusable_hint)
        return request.num_tokens - computed

    @property
    def has_free_lane(self) -> bool:
        return any(lane.request is None for lane in self._sched.lanes[: self._sched.config.num_lanes])

    def attained(self, agent: str) -> float:
        """Weighted tokens the agent's session has received (least-attained-service's rank)."""
        return self._sched.service.attained[agent]

    def virtual(self, agent: str) -> float:
        """The agent's VTC counter: its service divided by its weight (fair share's rank)."""
        return self._sched.service.virtual[agent]
