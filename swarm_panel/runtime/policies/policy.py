"""Scheduling policies: small strategies that read a view of the scheduler and return decisions.

The mechanics (lanes, chunked prefill, KV accounting) live in the scheduler; a policy answers its
questions from a read-only SchedulerView (below) and changes nothing itself:
- admit: may waiting requests enter free lanes now, and in which order (an Admission);
- pads: does a finished lane keep riding as padding until its batch ends;
- when a step cannot carry every lane (KV or the prefill budget spent): which lanes compute, which
  prompt gets the prefill budget first, and which lane gives up its KV;
- predicted_tok_s: what the article's arithmetic on a fitted step line (runtime.core.fit) says it yields.
Each policy also carries what the CLI, the HTTP API and the panel show of it (name, label, summary,
colour, family). The batching policies here are the seed's three; the agent-aware ones are continuous
batching with an order over agents (runtime.policies.ranked and one file each), and
swarm_panel.runtime.policies.registry lists them all.

What a policy may read of the scheduler (`SchedulerView`): its queue, its lanes' occupancy, its knobs
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
from typing import TYPE_CHECKING, Protocol

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RowKind, StepResult
from swarm_panel.runtime.core.request import Request

if TYPE_CHECKING:
    from swarm_panel.runtime.core.fit import StepLine

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


# -- the contract and the seed's batching policies --------------------------------------------------


@dataclass(slots=True, frozen=True)
class Admission:
    """A policy's answer before a step: whether waiting requests may enter free lanes, in which order."""

    enter: bool
    # The whole queue in the order to admit from (and keep); None keeps the present order.
    order: list[Request] | None = None


NOBODY = Admission(enter=False)
IN_QUEUE_ORDER = Admission(enter=True)


class Policy:
    name: str
    # What the panel and the CLI call it.
    label: str
    # One sentence for tooltips and the README: when to choose it.
    summary: str = ""
    colour: str = "#dce9e6"
    # "batching" (how lanes fill: the seed's argument) or "agent" (whose request goes first).
    family: str = "batching"
    # Under KV pressure, lanes beyond what fits skip the step with their KV kept, instead of the
    # newest lane being preempted and recomputed later.
    pauses_lanes = False

    def admit(self, view: SchedulerView, now: float) -> Admission:
        raise NotImplementedError

    def next_admission_time(self, view: SchedulerView) -> float | None:
        """When admission could next succeed without a new arrival; None means only events wake it."""
        return None

    def pads(self, view: SchedulerView) -> bool:
        """Whether finished lanes keep computing a throw-away row each step, as now they stand."""
        return False

    def lanes_to_run(self, view: SchedulerView, lanes: list[Lane], n: int) -> list[Lane]:
        """The `n` of these one-token lanes (in lane order) that get a row when not all of them fit."""
        return lanes[:n]

    def prefill_order(self, view: SchedulerView, lanes: list[Lane]) -> list[Lane]:
        """Prefilling lanes (oldest admission first) in the order they get the prefill budget."""
        return lanes

    def preemption_victim(self, view: SchedulerView, live: list[Lane]) -> Lane:
        """The live lane to give up its KV (and recompute later) when nothing else makes room."""
        return max(live, key=lambda lane: lane.admitted_seq)

    @classmethod
    def predicted_tok_s(cls, lengths_by_round: list[list[int]], line: StepLine) -> float:
        """Output tokens per second when each round puts one request per lane together: the
        article's arithmetic, decode steps only (prefill and KV reads ignored)."""
        raise NotImplementedError


class ContinuousPolicy(Policy):
    """Iteration-level scheduling: a freed lane is refilled from the queue on the very next step."""

    name = "continuous"
    label = "continuous"
    summary = ("Refills a freed lane from the queue on the next step, first come first served; prompts enter in "
               "chunks, the least left to compute first.")
    colour = "#6fd6b0"

    def admit(self, view: SchedulerView, now: float) -> Admission:
        return IN_QUEUE_ORDER

    def prefill_order(self, view: SchedulerView, lanes: list[Lane]) -> list[Lane]:
        # The prompt with the least left to compute first (an agent resending its conversation has only
        # the new turn left): a short turn's first token does not wait for a long prompt admitted
        # before it, which costs the long one only the short one's tokens.
        return sorted(lanes, key=view.prompt_left)

    @classmethod
    def predicted_tok_s(cls, lengths_by_round: list[list[int]], line: StepLine) -> float:
        # The full width throughout: right when every lane's total work is equal.
        return line.ceiling_tok_s(len(lengths_by_round[0]))


class StaticPolicy(Policy):
    """A batch forms when num_lanes requests wait (or the oldest waited long enough) and runs to its end."""

    def admit(self, view: SchedulerView, now: float) -> Admission:
        if view.num_occupied_lanes or not view.num_waiting:
            return NOBODY
        full = view.num_waiting >= view.config.num_lanes
        # The same sum next_admission_time() returns, so waking exactly then always admits.
        waited = now >= view.oldest_arrival + view.config.admission_wait_s
        return IN_QUEUE_ORDER if full or waited else NOBODY

    def next_admission_time(self, view: SchedulerView) -> float | None:
        if view.num_occupied_lanes or not view.num_waiting:
            return None
        return view.oldest_arrival + view.config.admission_wait_s

    @classmethod
    def predicted_tok_s(cls, lengths_by_round: list[list[int]], line: StepLine) -> float:
        useful = sum(sum(r) for r in lengths_by_round)
        width = len(lengths_by_round[0])
        ms = sum(cls.round_ms(sorted(lengths), width, line) for lengths in lengths_by_round)
        return useful / (ms / 1e3)

    @classmethod
    def round_ms(cls, ordered: list[int], width: int, line: StepLine) -> float:
        """How long one batch of these output lengths (shortest first) takes."""
        raise NotImplementedError


class NaiveStaticPolicy(StaticPolicy):
    name = "naive"
    label = "naive static"
    summary = ("Static batch frozen at its width until the longest sequence ends: finished lanes ride along "
               "as padding.")
    colour = "#e07a5f"

    def pads(self, view: SchedulerView) -> bool:
        # Until the batch's last live sequence ends.
        return view.num_running > 0

    @classmethod
    def round_ms(cls, ordered: list[int], width: int, line: StepLine) -> float:
        return ordered[-1] * line.step_ms(width)


class ShrinkingStaticPolicy(StaticPolicy):
    name = "shrinking"
    label = "shrinking static"
    summary = "Static batch that drops finished lanes but admits nobody until it is empty: a slow tail."
    colour = "#f2a541"

    @classmethod
    def round_ms(cls, ordered: list[int], width: int, line: StepLine) -> float:
        # The width steps down as each lane ends.
        ms, done = 0.0, 0
        for i, n in enumerate(ordered):
            ms += (n - done) * line.step_ms(width - i)
            done = n
        return ms
