"""Scheduling policies: small strategies that read a view of the scheduler and return decisions.

The mechanics (lanes, chunked prefill, KV accounting) live in the scheduler; a policy answers its
questions from a read-only SchedulerView (runtime.policies.view) and changes nothing itself:
- admit: may waiting requests enter free lanes now, and in which order (an Admission);
- pads: does a finished lane keep riding as padding until its batch ends;
- when a step cannot carry every lane (KV or the prefill budget spent): which lanes compute, which
  prompt gets the prefill budget first, and which lane gives up its KV;
- predicted_tok_s: what the article's arithmetic on a fitted step line (runtime.core.fit) says it yields.
Each policy also carries what the CLI, the HTTP API and the panel show of it (name, label, summary,
colour, family). The batching policies here are the seed's three; the agent-aware ones are continuous
batching with an order over agents (runtime.policies.ranked and one file each), and
swarm_panel.runtime.policies.registry lists them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from swarm_panel.runtime.core.fit import StepLine
    from swarm_panel.runtime.core.request import Request
    from swarm_panel.runtime.policies.view import Lane, SchedulerView


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
