"""The engine core: what happens to requests on the engine's side, in the order it happens.

  inbox     other threads post adds, aborts, config changes and widenings; drained between steps
  schedule  the scheduler plans a step from lane state (runtime.scheduling.scheduler.schedule)
  execute   the engine runs the whole step in one call (runtime.core.engine.Engine.step)
  update    sampled tokens become text (runtime.serving.detokenize), the scheduler folds them back
  publish   the step's figures, then its outputs (each request's listener, then every sink with the
            step's whole list in one call), then one immutable EngineSnapshot for other threads

`EngineCore` is the step, single-threaded: benchmarks and tests drive it themselves, on a virtual
clock too. `EngineThread` runs it on a thread of its own behind the inbox: the only place the
scheduler and engine are touched while serving. A request's limits are decided once, at admission
(`EngineThread.admit`: runtime.scheduling.lanes.settle); between steps only what a change since
then could break is looked at again (runtime.serving.relayout: the KV layout).

Overlap (`overlap`, for an engine whose compute returns before its outputs are ready: a card): a step's
figures and outputs go out while the device computes the next step, not before it is launched, so the
device does not wait for them. They are out before anything else is delivered, and before the core
idles (`flush`), so every request's outputs keep their order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import (
    Engine,
    EngineError,
    KVCacheFull,
    RealClock,
    StepPlan,
    StepResult,
    VirtualClock,
)
from swarm_panel.runtime.core.request import Request, RequestStatus
from swarm_panel.runtime.core.stats import StepStats
from swarm_panel.runtime.core.step_outcome import Delivery, StepOutcome
from swarm_panel.runtime.scheduling.lanes import (
    DEFAULT_MAX_TOKENS,
    RequestRejected,
    Settled,
    checked_config,
    settle,
)
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.detokenize import OutputProcessor
from swarm_panel.runtime.serving.metrics import (
    EngineSnapshot,
    LaneView,
    MetricsAggregator,
    StepAccount,
    StepTotals,
    snapshot_of,
)
from swarm_panel.runtime.serving.relayout import NARROW_AFTER_S, Relayouts

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.1

OutputSink = Callable[[Sequence[Delivery]], None]


class EngineUnavailable(RuntimeError):
    """The engine thread is stopping or stopped; nothing more can be queued."""


class EngineCore:
    """One step at a time on the caller's thread: schedule, execute, update, publish."""

    def __init__(
        self,
        scheduler: Scheduler,
        engine: Engine,
        clock: VirtualClock | RealClock,
        on_stats: Callable[[StepStats], None] | None = None,
        on_outputs: OutputSink | None = None,
        overlap: bool | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.engine = engine
        self.clock = clock
        self.on_stats = on_stats
        self.on_outputs = on_outputs
        self.output = OutputProcessor(engine.piece, engine.max_context)
        # Where each step's time went (runtime.serving.metrics.StepAccount), read by benchmarks and /metrics.
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
            plan.while_computing = lambda: self._publish(pending)
        try:
            result = self._last_result = self._execute(plan)
        finally:
            # Where the engine did not publish it while computing (nothing reached the device, or it failed).
            if pending is not None:
                self._publish(pending)
        if result is None:
            return None
        self.clock.advance(result.duration_s)
        result.duration_s = self.clock.now() - start
        outcome = self._update(plan, result)
        if self.overlap:
            self._pending = outcome
        else:
            self._publish(outcome)
        return outcome.stats

    def _execute(self, plan: StepPlan) -> StepResult | None:
        try:
            return self.engine.step(plan)
        except KVCacheFull:
            # The engine keeps no part of a failed batch: make room and let the next step plan again.
            log.warning("engine found no KV slot for %d tokens; preempting", plan.num_tokens)
            self.deliver(self.scheduler.handle_kv_full(self.clock.now()))
            return None
        except EngineError as exc:
            log.error("engine step failed: %s", exc)
            errors = {row.request.request_id: f"engine error: {exc}" for row in plan.rows
                      if row.request.status is RequestStatus.RUNNING}
            return StepResult(samples={}, duration_s=0.0, errors=errors)

    def _update(self, plan: StepPlan, result: StepResult) -> StepOutcome:
        self.output.process(plan, result)
        return self.scheduler.update(plan, result, self.clock.now())

    def flush(self) -> bool:
        """Publishes a held step's figures and outputs now; False when none was held."""
        pending, self._pending = self._pending, None
        if pending is None:
            return False
        self._publish(pending)
        return True

    def _publish(self, outcome: StepOutcome) -> None:
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


class EngineThread:
    """The core on a thread of its own. Other threads (the asyncio loop, the Qt GUI) post to its inbox,
    drained at every step boundary, and read what it publishes: metrics, the applied config, and after
    every step one EngineSnapshot. A sink that hands a step's outputs to another thread wakes it once
    per step, not once per token."""

    def __init__(self, engine: Engine, config: SchedulerConfig, metrics: MetricsAggregator | None = None,
                 narrow_after_s: float | None = NARROW_AFTER_S) -> None:
        self.engine = engine
        self.metrics = metrics or MetricsAggregator()
        self.clock = RealClock()
        self.metrics.clock = self.clock.now
        self.core = EngineCore(Scheduler.for_engine(config, engine), engine, self.clock,
                               on_stats=self.metrics.observe, on_outputs=self._fan_out)
        self._requested_config = config
        # (kind, item, clock time it was posted)
        self._inbox: list[tuple[str, object, float]] = []
        # Guards the inbox, the pending count, the sinks and the scheduler's replacement; never held across a step.
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._ended = False
        self._close_on_exit = False
        self._sinks: tuple[OutputSink, ...] = ()
        # Requests posted but not yet in the scheduler's queue; changed only under the lock, together
        # with the move into the queue, so num_waiting never counts a request twice or not at all.
        self._pending_adds = 0
        self.error_count = 0
        self.relayouts = Relayouts(self, narrow_after_s)
        self._snapshot = self._take_snapshot()

    @property
    def scheduler(self) -> Scheduler:
        return self.core.scheduler

    # -- called from any thread ----------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="swarm-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0, close_engine: bool = False) -> None:
        """Asks the thread to end after its step and waits up to `timeout`. A step in flight
        cannot be cut short inside the engine's native call (a first step on a device may compile its shaders
        for minutes), and its engine must not be closed under it: with `close_engine`, the engine is closed
        once the thread has ended, here or by the thread itself after that step."""
        self._stopping = True
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
        with self._lock:
            ended = thread is None or self._ended
            self._close_on_exit = close_engine and not ended
        if not ended:
            log.error("engine thread did not stop within %.0f s: it is still inside a step%s", timeout,
                      "; it closes the engine after it" if close_engine else "")
        elif close_engine:
            self.engine.close()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def config(self) -> SchedulerConfig:
        """The newest config asked for; it applies at the next step boundary."""
        return self._requested_config

    @property
    def num_waiting(self) -> int:
        """Requests queued for a lane, those still in the inbox included (the 503 check reads this).

        Live, not from the last snapshot: admission at the start of a step must show at once."""
        with self._lock:
            return len(self.scheduler.waiting) + self._pending_adds

    @property
    def num_running(self) -> int:
        return self._snapshot.running

    def snapshot(self) -> EngineSnapshot:
        return self._snapshot

    def step_times(self) -> StepTotals:
        """Where the engine thread's time has gone since it started (runtime.serving.metrics.StepAccount)."""
        return self.core.account.totals()

    @property
    def busy_s(self) -> float:
        """How long the engine thread has been inside one step: far past a step's usual length (a few
        seconds for a long prompt chunk on a CPU), the step is stuck in the engine."""
        return max(0.0, self.clock.now() - self._snapshot.time)

    def lanes(self) -> tuple[LaneView, ...]:
        return self._snapshot.lanes

    def subscribe(self, sink: OutputSink) -> Callable[[], None]:
        """Calls sink(outputs) on the engine thread once per step that produced outputs, with all of
        them; returns a function that unsubscribes. A sink must be quick: the engine waits for it."""
        with self._lock:
            self._sinks = (*self._sinks, sink)

        def unsubscribe() -> None:
            with self._lock:
                self._sinks = tuple(s for s in self._sinks if s is not sink)

        return unsubscribe

    def admit(self, num_prompt_tokens: int, asked_max_tokens: int | None, *,
              default_max_tokens: int = DEFAULT_MAX_TOKENS) -> tuple[Settled, Future[str | None] | None]:
        """Admission, the one place a request's limits are decided: its max_tokens, settled from the
        last snapshot's caps and budget (runtime.scheduling.lanes.settle), and, where it fits only
        once the engine widens its KV layout, a future of the widening at the next step boundary (None,
        or why it could not). Raises RequestRejected where it can never run."""
        if self._stopping:
            raise EngineUnavailable("the engine is shutting down")
        snapshot = self._snapshot
        settled = settle(snapshot.caps, snapshot.kv_budget, num_prompt_tokens, asked_max_tokens,
                         default=default_max_tokens)
        if settled.long:
            self.relayouts.long_seen = self.clock.now()
        if not settled.widens:
            return settled, None
        outcome: Future[str | None] = Future()
        self._post("widen", (f"a request of {num_prompt_tokens + settled.max_tokens:,} tokens", outcome))
        return settled, outcome

    def submit(self, request: Request, settled: Settled | None = None) -> None:
        """Queues a request whose max_tokens `admit` settled; one that comes without it is admitted here,
        raising RequestRejected at once where its max_tokens could never run."""
        if settled is None:
            settled, _ = self.admit(request.num_prompt_tokens, request.sampling.max_tokens)
            if settled.max_tokens < request.sampling.max_tokens:
                raise RequestRejected(settled.note or "max_tokens does not fit")
        elif self._stopping:
            raise EngineUnavailable("the engine is shutting down")
        self._post("add", (request, settled))

    def abort(self, request_id: int) -> None:
        self._post("abort", request_id)

    def reconfigure(self, **changes: object) -> SchedulerConfig:
        """Validates at once (raising ValueError) and applies at the next step boundary."""
        with self._lock:
            config = checked_config(self._requested_config.with_changes(**changes), self.scheduler.caps)
            self._requested_config = config
            self._inbox.append(("config", config, self.clock.now()))
        self._wake.set()
        return config

    def _post(self, kind: str, item: object) -> None:
        with self._lock:
            # Stamped here: a request's latencies count from its submission, inbox wait included.
            self._inbox.append((kind, item, self.clock.now()))
            if kind == "add":
                self._pending_adds += 1
        self._wake.set()

    # -- the engine thread: inbox, then the core's step, then the snapshot ---------------------

    def _run(self) -> None:
        account = self.core.account
        while not self._stopping:
            wall, cpu = time.perf_counter(), time.thread_time()
            self._drain_inbox()
            self.relayouts.narrow_when_quiet()
            account.add_host(time.perf_counter() - wall, time.thread_time() - cpu)
            try:
                stats = self.core.step()
            except Exception as exc:  # a bug or a broken engine must not strand the clients
                log.exception("engine step failed")
                self.error_count += 1
                self._fail_everything(f"engine failure: {exc}")
                stats = None
            wall, cpu = time.perf_counter(), time.thread_time()
            self._publish()
            if stats is not None:
                self.relayouts.follow_attention()
            if stats is None and not self.scheduler.num_running:
                s = self.scheduler
                self.metrics.note_idle(s.kv_used, s.kv_cached, s.kv_budget, len(s.waiting))
                account.add_host(time.perf_counter() - wall, time.thread_time() - cpu)
                wall = time.perf_counter()
                self._wake.wait(self._idle_timeout())
                account.add_idle(time.perf_counter() - wall)
            else:
                account.add_host(time.perf_counter() - wall, time.thread_time() - cpu)
        self._drain_inbox()
        self._fail_everything("the server is shutting down")
        # Checked under the lock stop() decides under, so the engine is closed exactly once: by stop() if this
        # thread ended in time, else here.
        with self._lock:
            self._ended = True
            close = self._close_on_exit
        if close:
            self.engine.close()

    def _drain_inbox(self) -> None:
        with self._lock:
            inbox, self._inbox = self._inbox, []
            self._wake.clear()
        now = self.clock.now()
        outputs = []
        for kind, item, posted in inbox:
            try:
                if kind == "add":
                    outputs += self._enqueue(*item, posted)
                elif kind == "abort":
                    outputs += self.scheduler.abort(item, now)
                elif kind == "widen":
                    why, outcome = item
                    outcome.set_result(self.relayouts.widen(why))
                else:
                    outputs += self.scheduler.reconfigure(item, now)
            except ValueError as exc:
                log.warning("ignored %s: %s", kind, exc)
        self.core.deliver(outputs)

    def _enqueue(self, request: Request, settled: Settled, posted: float) -> list[Delivery]:
        """Moves an admitted request into the scheduler's queue, as one change for num_waiting's readers;
        where the layout changed since its admission, it is looked at as a queued request is then."""
        why = self.relayouts.unfit_since(request, settled)
        with self._lock:
            self._pending_adds -= 1
            if why is None:
                self.scheduler.add(request, posted)
                return []
        return self.scheduler.fail_unqueued(request, posted, why)

    def replace_scheduler(self, scheduler: Scheduler) -> Scheduler:
        """A relayout's new scheduler takes over every request, as one change for num_waiting's readers,
        and is published at once: a request admitted after the outcome is known must see the new caps."""
        with self._lock:
            scheduler.take_over(self.scheduler)
            self.core.scheduler = scheduler
        self.core.output.max_context = self.engine.max_context
        self._publish()
        return scheduler

    def _idle_timeout(self) -> float:
        wake = self.scheduler.next_admission_time()
        if wake is None:
            return IDLE_POLL_S
        return min(max(wake - self.clock.now(), 0.0), IDLE_POLL_S)

    def _fan_out(self, outputs: Sequence[Delivery]) -> None:
        for sink in self._sinks:
            try:
                sink(outputs)
            except Exception:
                log.exception("an output sink failed")

    def _fail_everything(self, message: str) -> None:
        now = self.clock.now()
        ids = [lane.request.request_id for lane in self.scheduler.lanes if lane.is_live]
        ids += [request.request_id for request in self.scheduler.waiting]
        outputs = [out for request_id in ids for out in self.scheduler.abort(request_id, now, error=message)]
        self.scheduler.end_batch()
        self.core.deliver(outputs)
        self._publish()

    def _publish(self) -> None:
        """One snapshot per step, replaced whole: readers on other threads take it without a lock."""
        self._snapshot = self._take_snapshot()

    def _take_snapshot(self) -> EngineSnapshot:
        return snapshot_of(self.scheduler, self.clock.now())

