"""One step: schedule, run, fold back, tell listeners. Single-threaded; the caller owns the thread."""

from __future__ import annotations

import logging
from collections.abc import Callable

from runtime.clock import RealClock, VirtualClock
from runtime.engine import Engine, EngineError, KVCacheFull, StepPlan, StepResult
from runtime.request import RequestStatus
from runtime.scheduler import Scheduler
from runtime.stats import StepStats

log = logging.getLogger(__name__)


class EngineLoop:
    def __init__(
        self,
        scheduler: Scheduler,
        engine: Engine,
        clock: VirtualClock | RealClock,
        on_stats: Callable[[StepStats], None] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.engine = engine
        self.clock = clock
        self.on_stats = on_stats

    def step(self) -> StepStats | None:
        """Runs one step; None when there was nothing to compute."""
        start = self.clock.now()
        plan = self.scheduler.schedule(start)
        if not plan.rows and not plan.release and not plan.prefix_ops:
            return None
        result = self._run(plan)
        if result is None:
            self.deliver()
            return None
        self.clock.advance(result.duration_s)
        result.duration_s = self.clock.now() - start
        # A plan without rows only releases or caches sequences: nothing to fold back or plot but
        # a sequence the engine could not keep.
        stats = self.scheduler.update(plan, result, self.clock.now()) if plan.rows else None
        if not plan.rows:
            self.scheduler.apply_refusals(result)
        self.deliver()
        if stats is not None and self.on_stats is not None:
            self.on_stats(stats)
        return stats

    def deliver(self) -> None:
        for request, output in self.scheduler.take_outputs():
            if request.listener is not None:
                try:
                    request.listener(output)
                except Exception:
                    log.exception("listener of request %d failed", request.request_id)

    def _run(self, plan: StepPlan) -> StepResult | None:
        try:
            return self.engine.step(plan)
        except KVCacheFull:
            # The engine keeps no part of a failed batch: make room and let the next step plan again.
            log.warning("engine found no KV slot for %d tokens; preempting", plan.num_tokens)
            self.scheduler.handle_kv_full(self.clock.now())
            return None
        except EngineError as exc:
            log.error("engine step failed: %s", exc)
            return StepResult(samples={}, duration_s=0.0, errors=_fail_all(plan, str(exc)))


def _fail_all(plan: StepPlan, message: str) -> dict[int, str]:
    return {
        row.request.request_id: f"engine error: {message}"
        for row in plan.rows
        if row.request.status is RequestStatus.RUNNING
    }
