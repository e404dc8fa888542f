"""What a policy may read of the scheduler (`SchedulerView`): its queue, its lanes' occupancy, its knobs
and the agents' service; and that service (`AgentService`), kept whatever the policy so a switch loses
nothing.

A policy decides from this view and returns its decision; it never changes the scheduler itself.
The view reads the scheduler live, so one is built per scheduler, not per step.

The service: two counters per agent, both in weighted tokens (a computed prompt token counts 1, an
output token 2, as VTC weighs them: a decode row costs a step's share, a prompt token a fraction of one):
- `attained`: everything the agent's session has received, the rank least-attained-service uses;
- `virtual`: VTC's counter, the same tokens divided by the agent's weight, and lifted to the least
  counter among agents with work in the scheduler whenever an agent comes back from idle, so an
  agent cannot bank service while away and then take the card.

The service is written by the engine thread; /metrics reads `snapshot()` from another, hence the lock.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RowKind, StepResult
from swarm_panel.runtime.core.request import Request

PROMPT_WEIGHT = 1.0
OUTPUT_WEIGHT = 2.0


class Lane(Protocol):
    """What a policy reads of one lane (scheduling.lanes.Lane): policies sit below the scheduler."""

    request: Request | None
    admitted_seq: int
    prefix_checked: bool
    reusable_hint: int | None


class Scheduler(Protocol):
    """What the view reads of scheduling.scheduler.Scheduler."""

    config: SchedulerConfig
    waiting: Sequence[Request]
    lanes: Sequence[Lane]
    service: AgentService

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


# ----- the agents' service -----


@dataclass(slots=True, frozen=True)
class AgentTotals:
    agent: str
    prompt_tokens: int
    output_tokens: int
    attained: float


class AgentService:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.attained: Counter[str] = Counter()
        self.virtual: Counter[str] = Counter()
        self._prompt: Counter[str] = Counter()
        self._output: Counter[str] = Counter()
        # Requests in the scheduler (waiting or in a lane), by id, with the agent that sent them.
        self._open: dict[int, str] = {}
        self._open_per_agent: Counter[str] = Counter()

    def arrived(self, request: Request) -> None:
        agent = request.agent
        if not self._open_per_agent[agent]:
            busy = [self.virtual[a] for a, n in self._open_per_agent.items() if n and a != agent]
            if busy:
                self.virtual[agent] = max(self.virtual[agent], min(busy))
        self._open[request.request_id] = agent
        self._open_per_agent[agent] += 1

    def left(self, request: Request) -> bool:
        """A request left the scheduler; says whether its agent has none left there (it is idle now)."""
        agent = self._open.pop(request.request_id, None)
        if agent is None:
            return False
        self._open_per_agent[agent] -= 1
        return not self._open_per_agent[agent]

    def record_step(self, rows, result: StepResult, weights: Mapping[str, float]) -> None:
        """Charges each row the step computed to its agent."""
        with self._lock:
            for row in rows:
                request_id = row.request.request_id
                if row.kind is RowKind.PADDING or request_id in result.refused or request_id in result.errors:
                    continue
                agent = row.request.agent
                charge = 0.0
                if row.kind is RowKind.PREFILL:
                    self._prompt[agent] += len(row.tokens)
                    charge += PROMPT_WEIGHT * len(row.tokens)
                if row.sample and request_id in result.samples:
                    self._output[agent] += 1
                    charge += OUTPUT_WEIGHT
                self.attained[agent] += charge
                self.virtual[agent] += charge / weights.get(agent, 1.0)

    def snapshot(self) -> list[AgentTotals]:
        with self._lock:
            totals = [AgentTotals(a, self._prompt[a], self._output[a], self.attained[a])
                      for a in set(self._prompt) | set(self._output)]
        # Sorted outside the lock, which the engine thread takes every step.
        return sorted(totals, key=lambda t: t.agent)
