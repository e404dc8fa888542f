"""The running swarm: settings, the engine, its thread and metrics, reloadable as a whole.

The HTTP server and the desktop panel both hold one SwarmService; neither touches the engine directly.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from swarm_panel.app.service.agents import AgentActivity, AgentKeys, InflightAgents, RequestLog
from swarm_panel.app.service.engine_factory import engine_for
from swarm_panel.app.service.prompt_progress import ProgressLog
from swarm_panel.app.settings.schema import Settings
from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import Engine, engine_meta
from swarm_panel.runtime.serving.engine_core import EngineThread
from swarm_panel.runtime.serving.metrics import MetricsAggregator

log = logging.getLogger(__name__)


# Python's default hands the GIL over every 5 ms: an engine step returning from llama_decode could wait
# that long behind the HTTP loop or a repaint, while llama.cpp's threads sit idle.
GIL_SWITCH_INTERVAL_S = 0.001


def share_the_interpreter() -> None:
    """The engine thread shares one interpreter with the event loop (and the GUI): switch often."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


class SwarmService:
    def __init__(self, settings: Settings, engine_factory: Callable[[Settings], Engine] | None = None,
                 *, leave_a_core: bool = False) -> None:
        self.settings = settings
        # The desktop panel paints in this process: its engine leaves a core free unless threads are set.
        self.leave_a_core = leave_a_core
        # Builds the engine instead of the settings' engine/model (tests, custom profiles).
        self.engine_factory = engine_factory
        self.metrics = MetricsAggregator()
        self.inflight = InflightAgents()
        self.activity = AgentActivity()
        self.requests = RequestLog()
        self.progress_log = ProgressLog(self.activity)
        # Read at each request: the panel's key follows the user's --api-key as the settings change.
        self.agent_keys = AgentKeys(lambda: self.settings.api_key.get_secret_value() if self.settings.api_key else None)
        self._lock = threading.Lock()
        self._engine: Engine | None = None
        self._thread: EngineThread | None = None
        # The last scheduler config run: its agent maps outlive an unload, as the Settings knobs do.
        self._scheduler: SchedulerConfig | None = None
        self.load_error: str | None = None
        # The start-up stage under way (what, fraction done or None) while start() runs; None otherwise.
        # Written by the loading thread, read whole by the panel's timer.
        self.startup: tuple[str, float | None] | None = None

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise RuntimeError("no engine is loaded")
        return self._engine

    @property
    def engine_thread(self) -> EngineThread:
        if self._thread is None:
            raise RuntimeError("no engine is loaded")
        return self._thread

    @property
    def loaded(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Loads the engine the settings name and starts its thread; raises on a bad model."""
        with self._lock:
            if self._thread is not None:
                return
            s = self.settings
            try:
                if self.engine_factory is not None:
                    engine = self.engine_factory(s)
                else:
                    engine = engine_for(s, realtime=True, max_lanes=s.num_lanes, leave_a_core=self.leave_a_core,
                                        progress=self._startup_stage)
            except Exception as exc:
                self.load_error = str(exc)
                self.startup = None
                raise
            self.load_error = None
            self._engine = engine
            self.metrics.reset()
            self._startup_stage("starting the engine thread", None)
            self._thread = EngineThread(engine, s.scheduler_config(self._scheduler), self.metrics,
                                        narrow_after_s=s.kv_narrow_after_s or None)
            self._thread.start()
            self.progress_log.start()
            self.startup = None
            log.info("start-up: ready (%s)", engine.name)

    def _startup_stage(self, stage: str, fraction: float | None) -> None:
        if self.startup is None or self.startup[0] != stage:
            log.info("start-up: %s", stage)
        self.startup = (stage, fraction)

    def stop(self, wait_s: float = 10.0) -> None:
        """Stops the engine; the knobs changed live stay in the settings for the next start. An engine whose
        thread is still inside a step after `wait_s` is not freed under that step (which crashed in native
        code): the thread closes it once the step ends."""
        with self._lock:
            thread, engine = self._thread, self._engine
            self._thread = self._engine = None
        self.progress_log.stop()
        if thread is not None:
            thread.stop(wait_s, close_engine=True)
            self._keep(thread.config)
        elif engine is not None:
            engine.close()

    def _keep(self, config: SchedulerConfig) -> None:
        self._scheduler = config
        try:
            self.settings = self.settings.with_scheduler(config)
        except ValueError as exc:  # the scheduler allows knobs beyond the settings' bounds; the stop must finish
            log.warning("the next start keeps the settings' scheduler knobs, not the live ones: %s", exc)

    def reload(self, **changes: Any) -> None:
        """Stops the engine (failing what is in flight), applies setting changes, starts again."""
        self.stop()
        self.settings = Settings(**(self.settings.model_dump() | changes))
        self.start()

    def meta(self) -> dict[str, Any]:
        """The engine's facts and figures as one dict for the panel's engine box and its export; without
        an engine, why not."""
        return engine_meta(self.engine) if self._engine is not None else {"engine": None, "error": self.load_error}
