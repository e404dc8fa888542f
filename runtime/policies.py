"""Scheduling policies: small strategies that decide admission, which lanes compute, and padding.

The mechanics (lanes, chunked prefill, KV accounting) live in the scheduler; a policy says when
waiting requests may enter lanes (and in which order), whether a finished lane keeps riding as
padding, and, when a step cannot carry every lane (KV or the prefill budget spent), which lanes
compute and which wait. The batching policies here are the seed's three; the agent-aware ones are
continuous batching with an order over agents (runtime.policy_ranked and one file each), and
runtime.policy_registry lists them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.scheduler import Lane, Scheduler


class Policy:
    name: str
    label: str
    # One sentence for tooltips and the README: when to choose it.
    summary: str = ""
    colour: str = "#dce9e6"
    # "batching" (how lanes fill: the seed's argument) or "agent" (whose request goes first).
    family: str = "batching"
    # A finished lane keeps computing a throw-away row every step until its batch ends.
    pads_finished_lanes = False
    # Under KV pressure, lanes beyond what fits skip the step with their KV kept, instead of the
    # newest lane being preempted and recomputed later.
    pauses_lanes = False

    def admit(self, sched: Scheduler, now: float) -> None:
        raise NotImplementedError

    def next_admission_time(self, sched: Scheduler) -> float | None:
        """When admission could next succeed without a new arrival; None means only events wake it."""
        return None

    def lanes_to_run(self, sched: Scheduler, lanes: list[Lane], n: int) -> list[Lane]:
        """The `n` of these one-token lanes (in lane order) that get a row when not all of them fit."""
        return lanes[:n]

    def prefill_order(self, sched: Scheduler, lanes: list[Lane]) -> list[Lane]:
        """Prefilling lanes (oldest admission first) in the order they get the prefill budget."""
        return lanes

    def preemption_victim(self, sched: Scheduler, live: list[Lane]) -> Lane:
        """The live lane to give up its KV (and recompute later) when nothing else makes room."""
        return max(live, key=lambda lane: lane.admitted_seq)


class ContinuousPolicy(Policy):
    """Iteration-level scheduling: a freed lane is refilled from the queue on the very next step."""

    name = "continuous"
    label = "continuous"
    summary = "Refills a freed lane from the queue on the next step, first come first served; prompts enter in chunks."
    colour = "#6fd6b0"

    def admit(self, sched: Scheduler, now: float) -> None:
        sched.fill_free_lanes()


class StaticPolicy(Policy):
    """A batch forms when max_batch requests wait (or the oldest waited long enough) and runs to its end."""

    def admit(self, sched: Scheduler, now: float) -> None:
        if sched.num_occupied_lanes or not sched.waiting:
            return
        full = len(sched.waiting) >= sched.config.max_batch
        # The same sum next_admission_time() returns, so waking exactly then always admits.
        waited = now >= sched.waiting[0].arrival_time + sched.config.admission_wait_s
        if full or waited:
            sched.fill_free_lanes()

    def next_admission_time(self, sched: Scheduler) -> float | None:
        if sched.num_occupied_lanes or not sched.waiting:
            return None
        return sched.waiting[0].arrival_time + sched.config.admission_wait_s


class NaiveStaticPolicy(StaticPolicy):
    name = "naive"
    label = "naive static"
    summary = ("Static batch frozen at its width until the longest sequence ends: finished lanes ride along "
               "as padding.")
    colour = "#e07a5f"
    pads_finished_lanes = True


class ShrinkingStaticPolicy(StaticPolicy):
    name = "shrinking"
    label = "shrinking static"
    summary = "Static batch that drops finished lanes but admits nobody until it is empty: a slow tail."
    colour = "#f2a541"
