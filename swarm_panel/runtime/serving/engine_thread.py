"""The engine on its own thread: the only place the scheduler and engine are touched while serving.

Other threads (the asyncio loop, the Qt GUI) talk to it through an inbox that is drained at every
step boundary, and read what it publishes: metrics, the applied config, and after every step one
immutable EngineSnapshot (lanes and counters). Outputs leave once per step: each request's listener
is called on this thread, then every subscribed sink gets the step's whole list in one call, so a
sink that hands them to another thread wakes it once per step, not once per token.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import chain

from swarm_panel.runtime.core.clock import RealClock
from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import Engine, EngineCaps, EngineError, RelayoutKind
from swarm_panel.runtime.core.request import Request, RequestOutput
from swarm_panel.runtime.core.step_account import StepTotals
from swarm_panel.runtime.scheduling.limits import DEFAULT_MAX_TOKENS, RequestRejected, Settled, checked_config, settle
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_loop import EngineLoop
from swarm_panel.runtime.serving.metrics import MetricsAggregator

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.1
# A widened KV layout turns split again after this long with no request that needs more than a lane:
# about the gap an agent leaves between turns (a coding agent resends its long prompt every turn), as
# hosted APIs keep a prompt cache warm for five minutes.
NARROW_AFTER_S = 300.0


class EngineUnavailable(RuntimeError):
    """The engine thread is stopping or stopped; nothing more can be queued."""


@dataclass(slots=True, frozen=True)
class LaneView:
    index: int
    state: str  # "idle", "prefill", "decode" or "padding"
    request_id: int | None = None
    agent: str | None = None
    prompt_tokens: int = 0
    computed_tokens: int = 0
    output_tokens: int = 0


@dataclass(slots=True, frozen=True)
class EngineSnapshot:
    """What the scheduler held at the end of a step, published whole: readers never see half a step."""

    step: int
    lanes: tuple[LaneView, ...]
    waiting: int
    running: int
    kv_budget: int
    time: float  # clock time it was taken: the engine thread publishes at least every IDLE_POLL_S
    # What the engine holds and can do now: a widening or narrowing changes it between steps.
    caps: EngineCaps


OutputSink = Callable[[Sequence[tuple[Request, RequestOutput]]], None]


class EngineThread:
    def __init__(
        self,
        engine: Engine,
        config: SchedulerConfig,
        metrics: MetricsAggregator | None = None,
        narrow_after_s: float | None = NARROW_AFTER_S,
    ) -> None:
        self.engine = engine
        self.metrics = metrics or MetricsAggregator()
        self.clock = RealClock()
        self.scheduler = Scheduler.for_engine(config, engine)
        self.metrics.clock = self.clock.now
        self.loop = EngineLoop(self.scheduler, engine, self.clock, on_stats=self.metrics.observe,
                               on_outputs=self._fan_out)
        self._requested_config = config
        # (kind, item, clock time it was posted)
        self._inbox: list[tuple[str, object, float]] = []
        # Guards the inbox, the pending count and the sinks; never held across a step.
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._sinks: tuple[OutputSink, ...] = ()
        # Requests posted but not yet in the scheduler's queue; changed only under the lock, together
        # with the move into the queue, so num_waiting never counts a request twice or not at all.
        self._pending_adds = 0
        self._snapshot = self._take_snapshot()
        self.error_count = 0
        # Why the engine could not widen its KV layout, once it tried and could not.
        self._widen_failure: str | None = None
        # None: a widened layout stays unified.
        self.narrow_after_s = narrow_after_s
        # Clock time a request that needs more than a lane's share was last seen (arriving, queued or live).
        self._long_seen = 0.0
        # Where the engine can say which attention kernel serves the contexts seen lately, the kernel
        # follows them (the llama engine's CPU tuning; other engines have none).
        self.attention = engine.caps.attention

    # -- called from any thread ----------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="swarm-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("engine thread did not stop within %.0f s", timeout)
            self._thread = None

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
        """Where the engine thread's time has gone since it started (runtime.core.step_account)."""
        return self.loop.account.totals()

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
        """A request's max_tokens, settled once from the last snapshot's caps and budget
        (scheduling.limits.settle), and, where it fits only once the engine widens its KV layout, a
        future of the widening at the next step boundary (None, or why it could not). Raises
        RequestRejected where it can never run; submit checks the request again on this thread."""
        if self._stopping:
            raise EngineUnavailable("the engine is shutting down")
        snapshot = self._snapshot
        settled = settle(snapshot.caps, snapshot.kv_budget, num_prompt_tokens, asked_max_tokens,
                         default=default_max_tokens)
        if settled.long:
            self._long_seen = self.clock.now()
        if not settled.widens:
            return settled, None
        outcome: Future[str | None] = Future()
        self._post("widen", (f"a request of {num_prompt_tokens + settled.max_tokens:,} tokens", outcome))
        return settled, outcome

    def submit(self, request: Request) -> None:
        """Queues a request; raises RequestRejected at once if it could never run. One that fits only
        once the engine widens its KV layout has the engine widen first."""
        settled, _ = self.admit(request.num_prompt_tokens, request.sampling.max_tokens)
        if settled.max_tokens < request.sampling.max_tokens:
            raise RequestRejected(settled.note or "max_tokens does not fit")
        self._post("add", request)

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

    # -- the engine thread ---------------------------------------------------------------------

    def _post(self, kind: str, item: object) -> None:
        with self._lock:
            # Stamped here: a request's latencies count from its submission, inbox wait included.
            self._inbox.append((kind, item, self.clock.now()))
            if kind == "add":
                self._pending_adds += 1
        self._wake.set()

    def _drain_inbox(self) -> None:
        with self._lock:
            inbox, self._inbox = self._inbox, []
            self._wake.clear()
        now = self.clock.now()
        outputs = []
        for kind, item, posted in inbox:
            try:
                if kind == "add":
                    self._enqueue(item, posted)
                elif kind == "abort":
                    outputs += self.scheduler.abort(item, now)
                elif kind == "widen":
                    why, outcome = item
                    outcome.set_result(self._widen(why))
                else:
                    outputs += self.scheduler.reconfigure(item, now)
            except ValueError as exc:
                if kind == "add":
                    outputs += self.scheduler.fail_unqueued(item, now, str(exc))
                else:
                    log.warning("ignored %s: %s", kind, exc)
        self.loop.deliver(outputs)

    def _widen(self, why: str) -> str | None:
        """The engine turns its KV layout unified; a new scheduler, sized by its new caps, takes over
        every request, the live ones recomputing. Later requests find it done. Returns why it could
        not, or None."""
        if not self.scheduler.caps.widens_to:
            return self._widen_failure
        self._long_seen = self.clock.now()
        self._widen_failure = self._relayout(RelayoutKind.WIDEN, why)
        return self._widen_failure

    def _narrow_when_quiet(self) -> None:
        """A widened layout turns split again once no request has needed more than a lane's share for
        narrow_after_s: in unified KV every live token's attention walks every sequence's cells."""
        share = self.scheduler.caps.narrows_to
        if not share or self.narrow_after_s is None:
            return
        now = self.clock.now()
        if now - self._long_seen < self.narrow_after_s:
            return
        s = self.scheduler
        if any(r.num_prompt_tokens + r.sampling.max_tokens > share
               for r in chain((lane.request for lane in s.lanes.live()), s.waiting)):
            self._long_seen = now
            return
        self._relayout(RelayoutKind.NARROW, f"after {self.narrow_after_s:g} s with no request longer than a lane")

    def _follow_attention(self) -> None:
        """Prices the live lanes' contexts under both attention kernels and switches to the other one
        where runtime.llama.cpu_tuning.attention_follower says it pays; split layouts only (the curve was timed in one)."""
        follower, s = self.attention, self.scheduler
        if follower is None or not s.caps.consecutive_ids:
            return
        now = self.clock.now()
        live = [lane.request for lane in s.lanes.live()]
        follower.observe((request.num_tokens for request in live), now)
        target = follower.advice(now, lambda: follower.distinct_tokens(
            [r.token_ids[:r.num_computed_tokens] for r in live] + [entry.tokens for entry in s.prefix.cache]))
        if target is None:
            return
        why = (f"for the contexts served lately: a decode step {follower.ratio:.0%} of the cost it had "
               f"with flash attention {follower.current}")
        log.info("flash attention %s %s", target, why)
        if self._relayout(RelayoutKind.ATTENTION, why, target) is None:
            follower.switched(target, now)
        else:
            self.attention = None

    def _relayout(self, kind: RelayoutKind, why: str, flash_attn: str | None = None) -> str | None:
        """The engine changes its context (Engine.relayout), dropping every sequence; a new scheduler
        sized by its caps takes over every request, the live ones recomputing. Returns why the engine
        could not change, or None."""
        old = self.scheduler
        failure = None
        try:
            self.engine.relayout(kind, why, flash_attn)
        except EngineError as exc:
            # The old layout is back: requests are sized by it as before.
            log.error("%s", exc)
            failure = str(exc)
        except Exception as exc:  # no context at all: the steps fail their requests, as a broken engine's do
            log.exception("the engine broke while changing its KV layout")
            failure = f"the engine broke while changing its KV layout: {exc}"
        scheduler = Scheduler.for_engine(old.config, self.engine)
        live = old.num_running
        with self._lock:
            scheduler.take_over(old)
            self.scheduler = self.loop.scheduler = scheduler
        log.info("the new context took over %d live requests (recomputing) and %d waiting", live,
                 len(scheduler.waiting) - live)
        self.loop.output.max_context = self.engine.max_context
        # Published at once: a request admitted after the outcome is known must see the new caps.
        self._snapshot = self._take_snapshot()
        return failure

    def _enqueue(self, request: Request, posted: float) -> None:
        """Moves a posted request into the scheduler's queue, as one change for num_waiting's readers."""
        caps, total = self.scheduler.caps, request.num_prompt_tokens + request.sampling.max_tokens
        if caps.widens_to and total > caps.max_context:
            # The layout narrowed between this request's check and now: it widens again first.
            self._widen(f"a request of {total:,} tokens")
        with self._lock:
            self._pending_adds -= 1
            self.scheduler.add(request, posted)

    def _run(self) -> None:
        account = self.loop.account
        while not self._stopping:
            wall, cpu = time.perf_counter(), time.thread_time()
            self._drain_inbox()
            self._narrow_when_quiet()
            account.add_host(time.perf_counter() - wall, time.thread_time() - cpu)
            try:
                stats = self.loop.step()
            except Exception as exc:  # a bug or a broken engine must not strand the clients
                log.exception("engine step failed")
                self.error_count += 1
                self._fail_everything(f"engine failure: {exc}")
                stats = None
            wall, cpu = time.perf_counter(), time.thread_time()
            self._publish()
            if stats is not None:
                self._follow_attention()
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

    def _idle_timeout(self) -> float:
        wake = self.scheduler.next_admission_time()
        if wake is None:
            return IDLE_POLL_S
        return min(max(wake - self.clock.now(), 0.0), IDLE_POLL_S)

    def _fan_out(self, outputs: Sequence[tuple[Request, RequestOutput]]) -> None:
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
        self.loop.deliver(outputs)
        self._publish()

    def _publish(self) -> None:
        """One snapshot per step, replaced whole: readers on other threads take it without a lock."""
        self._snapshot = self._take_snapshot()

    def _take_snapshot(self) -> EngineSnapshot:
        views = []
        for lane in self.scheduler.lanes:
            request = lane.request
            if request is None:
                views.append(LaneView(lane.index, "idle"))
                continue
            state = "padding" if lane.padding else "decode" if request.is_decoding else "prefill"
            views.append(
                LaneView(lane.index, state, request.request_id, request.agent, request.num_prompt_tokens,
                         request.num_computed_tokens, request.num_output_tokens)
            )
        s = self.scheduler
        running = sum(view.state in ("prefill", "decode") for view in views)
        return EngineSnapshot(s.num_steps, tuple(views), len(s.waiting), running, s.kv_budget, self.clock.now(),
                              s.caps)
