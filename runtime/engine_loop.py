"""One step: schedule, run, fold back, tell listeners. Single-threaded; the caller owns the thread."""

from __future__ import annotations

import logging
from collections.abc import Callable

from runtime.clock import RealClock, VirtualClock
from runtime.engine import Engine, EngineError, KVCacheFull, StepPlan, StepResult
from runtime.request import RequestStatus
from runtime.scheduler import Scheduler
from runtime.stats import StepStats
from runtime.step_outcome import Delivery

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
            return None
        self.clock.advance(result.duration_s)
        result.duration_s = self.clock.now() - start
        outcome = self.scheduler.update(plan, result, self.clock.now())
        self.deliver(outcome.outputs)
        if outcome.stats is not None and self.on_stats is not None:
            self.on_stats(outcome.stats)
        return outcome.stats

    def deliver(self, outputs: list[Delivery]) -> None:
        for request, output in outputs:
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
            self.deliver(self.scheduler.handle_kv_full(self.clock.now()))
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
