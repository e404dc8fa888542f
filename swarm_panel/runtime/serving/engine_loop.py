"""One step: schedule, run, turn tokens into text, fold back, tell listeners. Single-threaded; the
caller owns the thread.

Outputs go out once per step: each request's own listener (in-process callers), then `on_outputs`
with the whole step's list, which is how they cross to another thread in one message.

Overlap (`overlap`, for an engine whose compute returns before its outputs are ready: a card): a step's
figures and outputs go out while the device computes the next step, not before it is launched, so the
device does not wait for them. They are out before anything else is delivered, and before the loop
idles (`flush`), so every request's outputs keep their order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from swarm_panel.runtime.core.clock import RealClock, VirtualClock
from swarm_panel.runtime.core.engine import Engine, EngineError, KVCacheFull, StepPlan, StepResult
from swarm_panel.runtime.core.request import Request, RequestOutput, RequestStatus
from swarm_panel.runtime.core.stats import StepStats
from swarm_panel.runtime.core.step_account import StepAccount
from swarm_panel.runtime.core.step_outcome import Delivery, StepOutcome
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.output_processor import OutputProcessor

log = logging.getLogger(__name__)


class EngineLoop:
    def __init__(
        self,
        scheduler: Scheduler,
        engine: Engine,
        clock: VirtualClock | RealClock,
        on_stats: Callable[[StepStats], None] | None = None,
        on_outputs: Callable[[Sequence[tuple[Request, RequestOutput]]], None] | None = None,
        overlap: bool | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.engine = engine
        self.clock = clock
        self.on_stats = on_stats
        self.on_outputs = on_outputs
        self.output = OutputProcessor(engine.piece, engine.max_context)
        # Where each step's time went (runtime.core.step_account), read by benchmarks and /metrics.
        self.account = StepAccount()
        self._last_result: StepResult | None = None
        # None: where the engine computes asynchronously (EngineCaps.computes_async).
        self.overlap = engine.caps.computes_async if overlap is None else overlap
        # The last step's figures and outputs, held to go out while the next step computes.
        self._pending: StepOutcome | None = None

    def step(self) -> StepStats | None:
        """Runs one step; None when there was nothing to compute."""
        wall, cpu = time.perf_counter(), time.thread_time()
        stats = None
        try:
            stats = self._step()
            return stats
        finally:
            # A step that ran no rows (releases, prefix ops) is host work, not a step of the account.
            self.account.add_step(time.perf_counter() - wall, time.thread_time() - cpu,
                                  self._last_result if stats is not None else None)
            self._last_result = None

    def _step(self) -> StepStats | None:
        start = self.clock.now()
        plan = self.scheduler.schedule(start)
        if not plan.rows and not plan.release and not plan.prefix_ops:
            self.flush()
            return None
        pending, self._pending = self._pending, None
        if pending is not None:
            plan.while_computing = lambda: self._hand_out(pending)
        try:
            result = self._last_result = self._run(plan)
        finally:
            # Where the engine did not run it while computing (nothing reached the device, or it failed).
            if pending is not None:
                self._hand_out(pending)
        if result is None:
            return None
        self.clock.advance(result.duration_s)
        result.duration_s = self.clock.now() - start
        self.output.process(plan, result)
        outcome = self.scheduler.update(plan, result, self.clock.now())
        if self.overlap:
            self._pending = outcome
        else:
            self._hand_out(outcome)
        return outcome.stats

    def flush(self) -> bool:
        """Hands out a held step's figures and outputs now; False when none was held."""
        pending, self._pending = self._pending, None
        if pending is None:
            return False
        self._hand_out(pending)
        return True

    def _hand_out(self, outcome: StepOutcome) -> None:
        if outcome.handed_out:
            return
        outcome.handed_out = True
        # Figures before outputs: whoever has a request's last token finds its latencies counted.
        if outcome.stats is not None and self.on_stats is not None:
            self.on_stats(outcome.stats)
        self._deliver(outcome.outputs)

    def deliver(self, outputs: list[Delivery]) -> None:
        """Delivers outputs made outside a step (aborts, failures), after any held step's."""
        self.flush()
        self._deliver(outputs)

    def _deliver(self, outputs: list[Delivery]) -> None:
        if not outputs:
            return
        for request, output in outputs:
            if output.finished:
                self.output.forget(request.request_id)
            if request.listener is not None:
                try:
                    request.listener(output)
                except Exception:
                    log.exception("listener of request %d failed", request.request_id)
        if self.on_outputs is not None:
            try:
                self.on_outputs(outputs)
            except Exception:
                log.exception("the step's output sink failed")

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
