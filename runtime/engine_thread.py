"""The engine on its own thread: the only place the scheduler and engine are touched while serving.

Other threads (the asyncio loop, the Qt GUI) talk to it through an inbox that is drained at every
step boundary, and read what it publishes: metrics, the applied config, and a view of the lanes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from runtime.clock import RealClock
from runtime.config import SchedulerConfig
from runtime.engine import Engine
from runtime.engine_loop import EngineLoop
from runtime.limits import checked_config
from runtime.metrics import MetricsAggregator
from runtime.request import Request
from runtime.scheduler import Scheduler
from runtime.stats import StepStats

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.1


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


class EngineThread:
    def __init__(
        self,
        engine: Engine,
        config: SchedulerConfig,
        metrics: MetricsAggregator | None = None,
        on_stats: Callable[[StepStats], None] | None = None,
    ) -> None:
        self.engine = engine
        self.metrics = metrics or MetricsAggregator()
        self.clock = RealClock()
        self.scheduler = Scheduler.for_engine(config, engine)
        self._on_stats = on_stats
        self.metrics.clock = self.clock.now
        self.loop = EngineLoop(self.scheduler, engine, self.clock, on_stats=self._observe)
        self._requested_config = config
        self._inbox: list[tuple[str, object]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._lanes: tuple[LaneView, ...] = ()
        self._pending_adds = 0
        self.error_count = 0

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
        return len(self.scheduler.waiting) + self._pending_adds

    @property
    def num_running(self) -> int:
        return self.scheduler.num_running

    def lanes(self) -> tuple[LaneView, ...]:
        return self._lanes

    def submit(self, request: Request) -> None:
        """Queues a request; raises RequestRejected at once if it could never run."""
        if self._stopping:
            raise EngineUnavailable("the engine is shutting down")
        self.scheduler.check_fits(request.num_prompt_tokens, request.sampling.max_tokens)
        self._post("add", request)

    def abort(self, request_id: int) -> None:
        self._post("abort", request_id)

    def reconfigure(self, **changes: object) -> SchedulerConfig:
        """Validates at once (raising ValueError) and applies at the next step boundary."""
        with self._lock:
            config = checked_config(self._requested_config.with_changes(**changes), self.scheduler.caps)
            self._requested_config = config
            self._inbox.append(("config", config))
        self._wake.set()
        return config

    # -- the engine thread ---------------------------------------------------------------------

    def _post(self, kind: str, item: object) -> None:
        with self._lock:
            self._inbox.append((kind, item))
            if kind == "add":
                self._pending_adds += 1
        self._wake.set()

    def _drain_inbox(self) -> None:
        with self._lock:
            inbox, self._inbox = self._inbox, []
            self._wake.clear()
        now = self.clock.now()
        outputs = []
        for kind, item in inbox:
            try:
                if kind == "add":
                    self._pending_adds -= 1
                    self.scheduler.add(item, now)
                elif kind == "abort":
                    outputs += self.scheduler.abort(item, now)
                else:
                    outputs += self.scheduler.reconfigure(item, now)
            except ValueError as exc:
                if kind == "add":
                    outputs += self.scheduler.fail_unqueued(item, now, str(exc))
                else:
                    log.warning("ignored %s: %s", kind, exc)
        self.loop.deliver(outputs)

    def _run(self) -> None:
        while not self._stopping:
            self._drain_inbox()
            try:
                stats = self.loop.step()
            except Exception as exc:  # a bug or a broken engine must not strand the clients
                log.exception("engine step failed")
                self.error_count += 1
                self._fail_everything(f"engine failure: {exc}")
                stats = None
            self._publish_lanes()
            if stats is None and not self.scheduler.num_running:
                s = self.scheduler
                self.metrics.note_idle(s.kv_used, s.kv_cached, s.kv_budget, len(s.waiting))
                self._wake.wait(self._idle_timeout())
        self._drain_inbox()
        self._fail_everything("the server is shutting down")

    def _idle_timeout(self) -> float:
        wake = self.scheduler.next_admission_time()
        if wake is None:
            return IDLE_POLL_S
        return min(max(wake - self.clock.now(), 0.0), IDLE_POLL_S)

    def _observe(self, stats: StepStats) -> None:
        self.metrics.observe(stats)
        if self._on_stats is not None:
            self._on_stats(stats)

    def _fail_everything(self, message: str) -> None:
        now = self.clock.now()
        ids = [lane.request.request_id for lane in self.scheduler.lanes if lane.is_live]
        ids += [request.request_id for request in self.scheduler.waiting]
        outputs = [out for request_id in ids for out in self.scheduler.abort(request_id, now, error=message)]
        self.scheduler.end_batch()
        self.loop.deliver(outputs)
        self._publish_lanes()

    def _publish_lanes(self) -> None:
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
        self._lanes = tuple(views)
