"""Batching policies: small strategies that decide admission and what a finished lane does.

The mechanics (lanes, chunked prefill, KV accounting) live in the scheduler; a policy only says
when waiting requests may enter lanes and whether a finished lane keeps riding as padding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.scheduler import Scheduler


class Policy:
    name: str
    label: str
    # A finished lane keeps computing a throw-away row every step until its batch ends.
    pads_finished_lanes = False

    def admit(self, sched: Scheduler, now: float) -> None:
        raise NotImplementedError

    def next_admission_time(self, sched: Scheduler) -> float | None:
        """When admission could next succeed without a new arrival; None means only events wake it."""
        return None


class ContinuousPolicy(Policy):
    """Iteration-level scheduling: a freed lane is refilled from the queue on the very next step."""

    name = "continuous"
    label = "continuous"

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
    pads_finished_lanes = True


class ShrinkingStaticPolicy(StaticPolicy):
    name = "shrinking"
    label = "shrinking static"


POLICIES: dict[str, type[Policy]] = {
    p.name: p for p in (NaiveStaticPolicy, ShrinkingStaticPolicy, ContinuousPolicy)
}


def make_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}") from None
