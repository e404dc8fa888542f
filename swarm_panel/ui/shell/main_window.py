"""The main window: composes the panels and owns the one timer that pulls snapshots."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from functools import partial

from PySide6 import QtCore, QtGui, QtWidgets

from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.app.service.prompt_progress import prompt_progress
from swarm_panel.app.service.step_feed import StepFeed
from swarm_panel.app.settings.backends import format_backend
from swarm_panel.app.settings.schema import scheduler_values
from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.fit import StepLine, ceiling_tok_s
from swarm_panel.runtime.llama.facts import LlamaFacts
from swarm_panel.ui.fleet.fleet_mode import NOT_MEASURED_TIP, FleetMode, embedded_only
from swarm_panel.ui.panels.ab_run import ABRun
from swarm_panel.ui.panels.agents_panel import AgentsPanel
from swarm_panel.ui.panels.agents_table import agent_rows, with_priority
from swarm_panel.ui.panels.cache_panel import CachePanel
from swarm_panel.ui.panels.controls import SchedulerControls
from swarm_panel.ui.panels.endpoint_panel import EndpointPanel
from swarm_panel.ui.panels.engine_panel import EnginePanel, Loader, choice_for, writes_real_text
from swarm_panel.ui.panels.harness_panel import HarnessPanel
from swarm_panel.ui.panels.swarm_launcher import SwarmLauncher
from swarm_panel.ui.plots.ceiling_plot import CeilingPlot
from swarm_panel.ui.plots.lane_timeline import LaneTimeline
from swarm_panel.ui.plots.live_plots import PLOTS, PlotsPanel
from swarm_panel.ui.plots.service_plot import ServicePlot
from swarm_panel.ui.shell.docks import arrange, make_docks, size_docks
from swarm_panel.ui.shell.export import export_figures, export_png
from swarm_panel.ui.shell.status_bar import StatusBar, threads_note
from swarm_panel.ui.toolkit import theme
from swarm_panel.ui.toolkit.screen_fit import fit_rect, roomy, screen_key
from swarm_panel.ui.toolkit.settings_store import SettingsStore

log = logging.getLogger(__name__)

REFRESH_HZ = 15
SLOW_EVERY = 6  # table, status bar and step-line fit: every sixth refresh (about 2.5 Hz)
POLICY_CAPTION = "batching policy"
KNOBS_IN_FLEET = "Off while the fleet serves: every backend runs its own scheduler with its own knobs."
# What a first launch takes of a screen with room to spare (at least MIN_SHARE_SIZE); a smaller screen
# gets all of its available area.
SCREEN_SHARE = 0.88
MIN_SHARE_SIZE = (1680, 1000)
# saveState's version: a layout kept by a build with other docks is not restored into this one.
LAYOUT_VERSION = 2


class KpiStrip(QtWidgets.QWidget):
    """The story in five numbers, big: useful vs padding tok/s, utilization, occupancy, queue."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QtWidgets.QHBoxLayout(self)
        layout.setContentsMargins(4, 0, 4, 0)
        self.labels: dict[str, QtWidgets.QLabel] = {}
        tips = {"device_busy": "Share of the engine thread's last second the device spent computing (llama_decode "
                               "until its outputs are ready); the rest went to sampling, host work, waiting for "
                               "the GIL and idle time (docs/gpu.md)"}
        for key, title, colour in (("tok_s", "useful tok/s", theme.USEFUL), ("padding_tok_s", "padding tok/s", theme.PADDING),
                                   ("utilization", "utilization", theme.MINT),
                                   ("device_busy", "device busy", theme.MINT), ("ceiling", "ceiling tok/s", theme.MINT),
                                   ("occupancy", "occupancy", theme.USEFUL), ("queue", "waiting", theme.QUEUE)):
            box = QtWidgets.QVBoxLayout()
            box.setSpacing(0)
            value = QtWidgets.QLabel("–")
            value.setStyleSheet(f"color: {colour}; font-size: 17pt; font-weight: bold")
            caption = QtWidgets.QLabel(title)
            caption.setToolTip(tips.get(key, ""))
            caption.setStyleSheet(f"color: {theme.TEXT_DIM}; font-size: 9pt")
            box.addWidget(value)
            box.addWidget(caption)
            layout.addLayout(box)
            layout.addStretch(1)
            self.labels[key] = value

    def update_from(self, feed: StepFeed) -> None:
        self.show({key: feed.latest(key) for key in self.labels})

    def show(self, values: dict[str, float], missing_tip: str = "") -> None:
        """A key left out of `values` shows "–", with `missing_tip` saying why."""
        for key, label in self.labels.items():
            value = values.get(key, math.nan)
            label.setToolTip("" if key in values else missing_tip)
            if math.isnan(value):
                label.setText("–")
            elif key in ("utilization", "occupancy", "device_busy"):
                label.setText(f"{value:.0f}%")
            else:
                label.setText(f"{value:.0f}")


class MainWindow(QtWidgets.QMainWindow):
    closed = QtCore.Signal()
    engine_loaded = QtCore.Signal(object)  # None or the error message

    def __init__(self, service: SwarmService, store: SettingsStore | None = None, refresh_hz: float = REFRESH_HZ) -> None:
        super().__init__()
        self.service = service
        self.store = store
        self.setWindowTitle("swarm-panel: continuous batching for a local agent swarm")
        self.feed = StepFeed()
        self.url: str | None = None
        self._loading = False
        self._fleet_shown = False
        self._knobs_note = ""
        self._ticks = 0
        self._step_line: StepLine | None = None
        # The KV layout and the attention kernel last shown: a change marks the plots.
        self._kv_layout: tuple[str | None, str | None] | None = None
        self.refresh_seconds: list[float] = []
        self._fresh_layout = False  # arranged for this screen's size, not restored: the agents table wants its rows
        self.fits_screen = True  # off for a scripted capture of a fixed size
        # Asked before a close (True: quit); its argument says whether a Quit was asked for outright. None: quit.
        self.close_guard: Callable[[bool], bool] | None = None
        self._outright = self._forced = False
        self.shut = False  # shut down: the engine stopped, the settings saved
        self.http = None  # the HttpServer the app runs the endpoint on

        self.controls = SchedulerControls(self.apply_scheduler)
        self.kpis = KpiStrip()
        self.plots = PlotsPanel()
        # The modeled card's ceiling against context, a tab beside the live plots while that card runs.
        self.ceiling_plot = CeilingPlot()
        self.service_plot = ServicePlot()
        self.timeline = LaneTimeline()
        self.launcher = SwarmLauncher(lambda: self.service.engine_thread)
        self.ab = ABRun(self.feed, self.apply_scheduler, self.launcher, self.current_policy, self._ceiling)
        self.engine_panel = EnginePanel()
        self.cache_panel = CachePanel(self.apply_scheduler)
        self.endpoint = EndpointPanel()
        self.agents = AgentsPanel(service.activity)
        self.agent_view = self.agents.view
        self.harness = HarnessPanel(service.requests, lambda: self.url, lambda: self.service.settings,
                                    keys=service.agent_keys)
        self.status = StatusBar()
        self.setStatusBar(self.status)
        self._build_layout()
        self._build_menu()
        self.fleet = FleetMode(self.centre, lambda: self.service.settings, service.agent_keys)

        # The knobs the engine will start with, not the spin boxes' minimums, while it loads.
        self.controls.show_config(service.settings.scheduler_config(), force=True)
        self.cache_panel.show_config(service.settings.scheduler_config())
        self.loader = Loader(self)
        self.loader.done.connect(self._load_done)
        self.engine_panel.load_requested.connect(self.load_engine)
        self.engine_panel.unload_requested.connect(self.unload_engine)
        self.engine_panel.fleet_requested.connect(self.load_fleet)
        self.endpoint.api_key_changed.connect(self._api_key_changed)
        self.agents.table.priority_set.connect(self.set_agent_priority)
        self.launcher.round_done.connect(self.service_plot.show_round)
        self.timeline.lane_clicked.connect(self.show_lane)
        self.timer = QtCore.QTimer(self)
        self.timer.setInterval(round(1000 / refresh_hz))
        self.timer.timeout.connect(self.refresh)
        self._restore()
        self.place_on(self.screen())
        if service.loaded:
            self._engine_ready()
        self.timer.start()

    # -- layout --------------------------------------------------------------------------------

    def _build_layout(self) -> None:
        splitter = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        splitter.setChildrenCollapsible(False)
        self.plot_tabs = QtWidgets.QTabWidget()
        self.plot_tabs.setDocumentMode(True)  # no frame: with the tab bar hidden, the live plots look as alone
        self.plot_tabs.addTab(self.plots, "Live")
        self.plot_tabs.addTab(self.ceiling_plot, "Ceiling against context (modeled card)")
        self._show_ceiling_tab(False)
        for widget, stretch in ((self.plot_tabs, 4), (self.service_plot, 1), (self.timeline, 1)):
            splitter.addWidget(widget)
            splitter.setStretchFactor(splitter.count() - 1, stretch)
        self.splitters = {"centre": splitter, "plots": self.plots.splitter, "agents": self.agents.splitter}
        # Page 0: the embedded engine's plots; the fleet mode adds its plots as a page of their own.
        self.centre = QtWidgets.QStackedWidget()
        self.centre.addWidget(splitter)
        self.setCentralWidget(self.centre)
        # The policy switch and the figures it moves span the window above the docks.
        header = QtWidgets.QWidget()
        row = QtWidgets.QHBoxLayout(header)
        row.setContentsMargins(4, 2, 4, 2)
        self.policy_caption = QtWidgets.QLabel(POLICY_CAPTION)
        self.policy_caption.setStyleSheet(f"color: {theme.TEXT_DIM}; font-size: 9pt")
        switch_box = QtWidgets.QVBoxLayout()
        switch_box.setSpacing(0)
        switch_box.addWidget(self.controls.switch)
        switch_box.addWidget(self.policy_caption)
        row.addLayout(switch_box)
        row.addSpacing(16)
        row.addWidget(self.kpis, 1)
        self.header = QtWidgets.QToolBar("Batching policy")
        self.header.setObjectName("header")
        self.header.setMovable(False)
        self.header.setFloatable(False)
        self.header.toggleViewAction().setVisible(False)  # the mission's main control is never hidden
        self.header.addWidget(header)
        self.addToolBar(QtCore.Qt.ToolBarArea.TopToolBarArea, self.header)
        self.setDockOptions(QtWidgets.QMainWindow.DockOption.AnimatedDocks
                            | QtWidgets.QMainWindow.DockOption.AllowTabbedDocks
                            | QtWidgets.QMainWindow.DockOption.AllowNestedDocks)
        self.docks = make_docks(self, {"knobs": self.controls, "launcher": self.launcher, "ab": self.ab,
                                       "engine": self.engine_panel, "cache": self.cache_panel,
                                       "endpoint": self.endpoint, "coding": self.harness,
                                       "review": self.harness.worktrees, "agents": self.agents})
        self.harness.worktrees.counted.connect(
            lambda kept: self.docks["review"].setWindowTitle(f"Review ({kept})" if kept else "Review"))

    def _build_menu(self) -> None:
        menu = self.menuBar().addMenu("&File")
        for text, slot, shortcut in (("Export figures (CSV/JSON)…", self._export_figures_dialog, "Ctrl+E"),
                                     ("Export plots (PNG)…", self._export_png_dialog, "Ctrl+P"),
                                     ("Quit", self.quit, "Ctrl+Q")):
            action = QtGui.QAction(text, self)
            action.setShortcut(shortcut)
            action.triggered.connect(slot)
            menu.addAction(action)
        view = self.menuBar().addMenu("&View")
        for dock in self.docks.values():
            view.addAction(dock.toggleViewAction())
        view.addSeparator()
        self.plot_actions: dict[str, QtGui.QAction] = {}
        shows = {name: (f"{title} plot", partial(self.plots.set_plot_shown, name))
                 for name, (title, _, _) in PLOTS.items()}
        shows |= {"service": ("Service per agent plot", self.service_plot.setVisible),
                  "timeline": ("Lane timeline", self.timeline.setVisible)}
        for name, (text, show) in shows.items():
            action = view.addAction(text)
            action.setCheckable(True)
            action.setChecked(True)
            action.toggled.connect(show)
            self.plot_actions[name] = action
        view.addSeparator()
        view.addAction("Reset the layout", self.reset_layout)

    # -- scheduler -------------------------------------------------------------------------------

    def apply_scheduler(self, **changes: object) -> SchedulerConfig:
        if not self.service.loaded:
            raise RuntimeError("no engine is loaded")
        return self.service.engine_thread.reconfigure(**changes)

    def set_agent_priority(self, agent: str, priority: int) -> None:
        try:
            self.apply_scheduler(agent_priorities=with_priority(self.service.engine_thread.config.agent_priorities,
                                                                agent, priority))
        except (ValueError, RuntimeError) as exc:
            self.statusBar().showMessage(f"priority not set: {exc}", 5000)

    def current_policy(self) -> str:
        return self.service.engine_thread.config.policy if self.service.loaded else ""

    def _ceiling(self) -> float | None:
        value = self.feed.latest("ceiling")
        return None if math.isnan(value) else value

    # -- the one timer -------------------------------------------------------------------------

    def refresh(self) -> None:
        started = time.perf_counter()
        thread = None
        if self.service.loaded and not self._loading:
            try:
                thread = self.service.engine_thread
            except RuntimeError:
                thread = None
        if self._loading:
            self._show_startup()
        if thread is not None:
            config = thread.config
            self.controls.show_config(config)
            self.cache_panel.show_config(config)
            self.feed.note_config(config)
            self.feed.pull(self.service.metrics)
            self.feed.note_step_times(thread.step_times())
            self.feed.tick(waiting=thread.num_waiting)
        policy = thread.config.policy if thread is not None else ""
        self.plots.refresh(self.feed)
        self.timeline.refresh(self.feed, policy)
        if self.fleet.active:
            self.kpis.show(self.fleet.kpis(), NOT_MEASURED_TIP)
        else:
            self.kpis.update_from(self.feed)
        self.agent_view.refresh()
        if self._ticks % SLOW_EVERY == 0:
            self._refresh_slow(thread)
        self._ticks += 1
        self.refresh_seconds.append(time.perf_counter() - started)
        if len(self.refresh_seconds) > 4096:
            del self.refresh_seconds[:2048]

    def _refresh_slow(self, thread) -> None:
        if self.fleet.active:
            self._refresh_fleet_slow()
            return
        snapshot = self.service.metrics.snapshot()
        # Where t(B) is nearly flat over the widths a swarm holds (6-8 lanes on a CPU), noise can tip the
        # fit over to falling, which is no fit; the ceiling keeps the last line instead of flickering out.
        line = self._step_line = snapshot.step_line or self._step_line
        profile = getattr(self.service.engine, "profile", None) if self.service.loaded else None
        model_line = StepLine(profile.floor_ms, profile.per_row_ms, 0) if profile is not None else None
        measured = snapshot.step_ms_by_width
        # No fit yet (a naive batch runs at one width): the modeled card's own line.
        self.feed.ceiling_per_batch = partial(ceiling_tok_s, measured=measured, line=line or model_line)
        num_lanes = thread.config.num_lanes if thread is not None else snapshot.num_lanes
        engine = self.service.engine if self.service.loaded else None
        self.status.show_figures(line, num_lanes, snapshot.step_rate, snapshot.mean_step_ms, model_line,
                                 measured.get(num_lanes), threads_note(engine.figures() if engine else None))
        if profile is not None:
            self.ceiling_plot.set_lanes(num_lanes)
            self.ceiling_plot.show_swarm(snapshot, self.service.engine.caps.sequence_state_tokens)
        if engine is not None and isinstance(engine.facts, LlamaFacts):
            self._follow_layout(engine.facts)
        self.cache_panel.update_from(snapshot)
        inflight = self.service.inflight.snapshot()
        lanes = thread.lanes() if thread is not None else ()
        lane_states = {lane.agent: lane.state for lane in lanes if lane.agent and lane.state != "idle"}
        priorities = thread.config.agent_priorities if thread is not None else {}
        prompts = {agent: p.text() for agent, p in prompt_progress(self.service.activity).items()}
        rows = agent_rows(snapshot.agents, inflight, lane_states, priorities, prompts)
        self.service_plot.update_from(self.feed.axis_time(time.monotonic()), snapshot.agents, inflight, num_lanes,
                                      self.feed.markers[-20:])
        self.agents.set_agents(len(inflight), rows)
        if self.agent_view.agent is None and rows:  # something to watch from the first request on
            self.agent_view.show_agent(rows[0].agent)
        self.last_snapshot = snapshot

    def _follow_layout(self, facts: LlamaFacts) -> None:
        """The default split KV turns unified for a request longer than a lane's share, and split again
        once none has needed more for a while; the attention kernel follows the contexts served (and a
        widened pool's own). The facts, a marker on the plots and the engine panel's status line say so
        when either happens."""
        now = (facts.kv_layout, facts.flash_attn)
        before, self._kv_layout = self._kv_layout, now
        if before is None or now == before or not now[0]:
            return
        self.engine_panel.show_facts(self.service.meta())
        marks, changes = [], []
        if now[0] != before[0]:
            if facts.kv_unified:
                marks.append("KV unified")
                changes.append("The KV turned unified for a request longer than a lane's share")
            else:
                marks.append("KV split")
                changes.append("The KV turned split again: no request had needed more than a lane's share for a while")
        if now[1] != before[1]:
            marks.append(f"flash attn {now[1]}")
            if now[0] != before[0]:  # the layout's own kernel: its reason is in the facts
                changes[-1] += f", and flash attention {now[1]}"
            else:
                reason = facts.flash_attn_reason.partition(": ")[2]
                changes.append(f"Flash attention turned {now[1]}" + (f" ({reason})" if reason else ""))
        self.feed.mark(", ".join(marks))
        self.engine_panel.status.setText(f"Loaded. {'. '.join(changes)}. The requests live then recomputed their KV.")

    def _refresh_fleet_slow(self) -> None:
        """The gateway's figures where the embedded engine's would be; its policy can change over HTTP too."""
        self.policy_caption.setText(self.fleet.policy_caption())
        rows = self.fleet.agent_rows()
        self.agents.set_agents(sum(row.open > 0 for row in rows), rows)
        self.status.showMessage(self.fleet.summary())
        self.cache_panel.figures.setText("Each backend's prefix cache hit rate is plotted in the fleet panel.")

    def show_lane(self, lane: int) -> None:
        """Opens the agent view on whoever holds the lane now (the timeline shows the past too)."""
        lanes = self.service.engine_thread.lanes() if self.service.loaded else ()
        agent = lanes[lane].agent if lane < len(lanes) else None
        if agent is None:
            self.statusBar().showMessage(f"lane {lane} is idle now", 3000)
            return
        self.agent_view.show_agent(agent)

    # -- engine loading --------------------------------------------------------------------------

    @property
    def loading(self) -> bool:
        """An engine or a fleet is being started."""
        return self._loading

    def start_engine(self) -> None:
        """Loads the engine the service's settings name, off the GUI thread."""
        if self.service.loaded:
            self._engine_ready()
            self.engine_loaded.emit(None)
            return
        self._begin_load("Loading the engine…", self.service.start)

    def load_engine(self, changes: dict) -> None:
        self.launcher.stop()
        self._leave_fleet()
        self._begin_load("Loading… (in-flight requests are failed and retried by agents)",
                         lambda: self.service.reload(**changes))

    def unload_engine(self) -> None:
        self.launcher.stop()
        self._leave_fleet()
        self.service.stop()
        self.engine_panel.show_facts(None)
        self._show_ceiling_tab(False)

    def load_fleet(self, backends: list) -> None:
        """Stops the embedded engine; the endpoint then answers through the gateway in front of `backends`."""
        self.launcher.stop()
        self.service.stop()
        self._show_ceiling_tab(False)
        self._loading = True
        self.engine_panel.set_busy("Connecting to the backends… (a backend that is down is shown as such)")
        self.fleet.begin(backends, self._fleet_done)

    def _fleet_done(self, error: str | None) -> None:
        self._loading = False
        if error is not None:
            self.engine_panel.set_error(error)
            self._show_fleet_mode(self.fleet.active)  # a new list refused: the old fleet was stopped first
        else:
            self.engine_panel.show_fleet([b.config for b in self.fleet.gateway.backends])
            self._show_fleet_mode(True)
            self._refresh_fleet_slow()  # a new list replacing a fleet already shown
        self.engine_loaded.emit(error)

    def _leave_fleet(self) -> None:
        if self.fleet.active:
            self.fleet.stop()
            self._show_fleet_mode(False)

    def _show_fleet_mode(self, active: bool) -> None:
        if active == self._fleet_shown:
            return
        self._fleet_shown = active
        buttons = list(self.controls.switch.buttons.values())
        embedded_only([*buttons, self.controls, self.cache_panel, self.ab], active)
        if active:
            # Every remote engine batches continuously; what the gateway chooses is the admission order.
            self.controls.switch.show_policy("continuous")
            self._knobs_note = self.controls.message.text()
            self.controls.message.setText(KNOBS_IN_FLEET)
        else:
            self.policy_caption.setText(POLICY_CAPTION)
            self.controls.message.setText(self._knobs_note)
            self.status.clearMessage()

    def _begin_load(self, text: str, work) -> None:
        self._loading = True
        self.engine_panel.set_busy(text)
        self.status.showMessage(text)
        self.loader.run(work)

    def _show_startup(self) -> None:
        """The start-up stage the service is in (its copy, probes, the weights' load), with its progress."""
        startup = self.service.startup
        if startup is None:
            return
        stage, fraction = startup
        self.engine_panel.show_stage(stage, fraction)
        self.status.showMessage(f"Starting: {stage}" + ("" if fraction is None else f" ({fraction:.0%})"))

    def _load_done(self, error: str | None) -> None:
        self._loading = False
        self.status.clearMessage()
        if error is not None:
            self.engine_panel.set_error(error)
        else:
            self._engine_ready()
        self.engine_loaded.emit(error)

    def _engine_ready(self) -> None:
        self._step_line = None
        self.engine_panel.show_facts(self.service.meta())
        facts = self.service.engine.facts if self.service.loaded else None
        self._kv_layout = (facts.kv_layout, facts.flash_attn) if isinstance(facts, LlamaFacts) else (None, None)
        self.launcher.suit_engine(writes_real_text(facts))
        settings = self.service.settings
        self.engine_panel.select(settings.engine, str(settings.model) if settings.model else None,
                                 settings.kv_unified, settings.threads, settings.extra_buffers, settings.kv_type)
        self.engine_panel.plan_for(settings)
        profile = getattr(self.service.engine, "profile", None) if self.service.loaded else None
        if profile is not None:
            self.ceiling_plot.set_profile(profile)
        self._show_ceiling_tab(profile is not None)
        if self.service.loaded:
            engine = self.service.engine
            self.controls.set_limits(engine.max_lanes, engine.kv_capacity)
            self.controls.show_config(self.service.engine_thread.config, force=True)
            self.feed.note_config(self.service.engine_thread.config)

    def _show_ceiling_tab(self, shown: bool) -> None:
        """The ceiling tab exists for the modeled card only; with the live plots alone, no tab bar."""
        index = self.plot_tabs.indexOf(self.ceiling_plot)
        self.plot_tabs.setTabVisible(index, shown)
        self.plot_tabs.tabBar().setVisible(shown)
        if not shown and self.plot_tabs.currentIndex() == index:
            self.plot_tabs.setCurrentWidget(self.plots)

    # -- endpoint --------------------------------------------------------------------------------

    def attach_endpoint(self, http) -> None:
        """The HttpServer the panel's endpoint runs on: the fleet mode swaps what it serves."""
        self.http = http
        self.fleet.attach(http)

    def set_endpoint(self, url: str | None, note: str = "") -> None:
        self.url = url
        self.launcher.url = url
        self.endpoint.set_url(url, note)
        self.status.show_address(url)

    def _api_key_changed(self, key: str) -> None:
        self.launcher.api_key = key or None
        self.api_key_requested(key)

    def api_key_requested(self, key: str) -> None:
        """Overridden by the app (it restarts the HTTP server with the key); nothing to do without one."""

    # -- export ----------------------------------------------------------------------------------

    def export_figures(self, path: str) -> None:
        snapshot = self.service.metrics.snapshot()
        extra = {"scheduler": None, "engine": self.service.meta(), "ab_results": self.ab.chart.results,
                 "endpoint": self.url}
        if self.service.loaded:
            extra["scheduler"] = scheduler_values(self.service.engine_thread.config)
        export_figures(path, snapshot, self.feed, extra)

    def export_plots(self, path: str) -> None:
        export_png(path, self.centralWidget())

    def _export_figures_dialog(self) -> None:
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Export figures", "swarm-panel-figures.json",
                                                        "JSON (*.json);;CSV (*.csv)")
        if path:
            self._guard(self.export_figures, path)

    def _export_png_dialog(self) -> None:
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Export plots", "swarm-panel-plots.png", "PNG (*.png)")
        if path:
            self._guard(self.export_plots, path)

    def _guard(self, action, path: str) -> None:
        try:
            action(path)
        except OSError as exc:
            QtWidgets.QMessageBox.warning(self, "Export failed", str(exc))
        else:
            self.statusBar().showMessage(f"Wrote {path}", 5000)

    # -- the screen ------------------------------------------------------------------------------

    def place_on(self, screen: QtGui.QScreen) -> None:
        """The layout last kept on this screen, else the first launch's for its size; never beyond its
        available area."""
        available = screen.availableGeometry()
        self.setScreen(screen)
        kept = self.store.layout(screen_key(screen)) if self.store is not None else {}
        if not (kept and self._restore_layout(kept)):
            self._arrange(available)
        self.fit_within(available)
        if self.isVisible():
            self._fit_to_screen()

    def _restore_layout(self, parts: dict[str, QtCore.QByteArray]) -> bool:
        if not (self.restoreGeometry(parts.get("geometry", QtCore.QByteArray()))
                and self.restoreState(parts.get("state", QtCore.QByteArray()), LAYOUT_VERSION)):
            return False
        for name, splitter in self.splitters.items():
            if name in parts:
                splitter.restoreState(parts[name])
        self.agents.auto_split = "agents" not in parts
        return True

    def layout_parts(self) -> dict[str, QtCore.QByteArray]:
        parts = {"geometry": self.saveGeometry(), "state": self.saveState(LAYOUT_VERSION)}
        return parts | {name: splitter.saveState() for name, splitter in self.splitters.items()}

    def _arrange(self, available: QtCore.QRect) -> None:
        arrange(self, self.docks, roomy(available))
        if not roomy(available):
            # Its height goes to the four live plots and the lane timeline; the View menu brings it back.
            self.plot_actions["service"].setChecked(False)
        width, height = (min(room, max(least, round(room * SCREEN_SHARE)))
                         for least, room in zip(MIN_SHARE_SIZE, (available.width(), available.height())))
        frame = QtCore.QRect(0, 0, width, height)
        frame.moveCenter(available.center())
        self.setGeometry(frame)
        self._fresh_layout = True

    def reset_layout(self) -> None:
        for action in self.plot_actions.values():
            action.setChecked(True)
        self.agents.set_hidden_columns([])
        self._arrange(self.screen().availableGeometry())
        self._fit_to_screen()

    def fit_within(self, available: QtCore.QRect) -> None:
        """Shrinks, then moves, the window so its frame (title bar included, where known) lies within `available`."""
        if self.isMaximized() or self.isFullScreen():
            return
        frame = self.frameGeometry() if self.isVisible() else self.geometry()
        inner = self.geometry()
        margins = QtCore.QMargins(inner.left() - frame.left(), inner.top() - frame.top(),
                                  frame.right() - inner.right(), frame.bottom() - inner.bottom())
        target = fit_rect(frame, margins, available)
        if target != inner:
            self.setGeometry(target)

    def showEvent(self, event: QtGui.QShowEvent) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        # The window manager's frame is known once shown: keep the title bar on the screen too.
        QtCore.QTimer.singleShot(0, self, self._fit_to_screen)

    @property
    def layout_settled(self) -> bool:
        """Shown, and a first arrangement given its docks' and splitters' sizes."""
        return self.isVisible() and not self._fresh_layout

    def _fit_to_screen(self) -> None:
        if self.fits_screen:
            self.fit_within(self.screen().availableGeometry())
        if self._fresh_layout and self.isVisible():
            # The splitter's heights exist once the window is laid out at its size.
            self.layout().activate()
            size_docks(self, self.docks, roomy(self.screen().availableGeometry()))
            # The service plot and the lane timeline a fifth of the height each (their minimum on a small
            # screen), the live plots the rest.
            centre = self.splitters["centre"]
            height = sum(centre.sizes())
            lower = [max(widget.minimumSizeHint().height(), height * 22 // 100) if widget.isVisible() else 0
                     for widget in (self.service_plot, self.timeline)]
            centre.setSizes([height - sum(lower), *lower])
            self.layout().activate()
            self.agents.give_table_its_rows()
            self._fresh_layout = False

    # -- settings and shutdown -------------------------------------------------------------------

    def _restore(self) -> None:
        # The remembered list reaches the settings through the app (ui/app_main._settings), as config.toml's does.
        if self.service.settings.backends:
            self.engine_panel.backends.set_backends(self.service.settings.backends)
        if self.store is None:
            return
        for name in self.store.get("plots_hidden", []) or []:
            if name in self.plot_actions:
                self.plot_actions[name].setChecked(False)
        self.agents.set_hidden_columns(self.store.get("agents_hidden_columns", []) or [])
        self.launcher.set_values(self.store.get("swarm", {}))
        self.harness.set_values(self.store.get("coding_agents", {}) or {})
        self.ab.seconds.setValue(int(self.store.get("ab_seconds", self.ab.seconds.value())))
        model = self.store.get("model_path", "") or ""
        if choice_for("llama", model or None) == "gguf":
            self.engine_panel.path.setText(model)

    def save_settings(self) -> None:
        if self.store is None:
            return
        self.store.set_layout(screen_key(self.screen()), self.layout_parts())
        self.store.set("plots_hidden", [name for name, action in self.plot_actions.items() if not action.isChecked()])
        self.store.set("agents_hidden_columns", self.agents.hidden_columns())
        self.store.set("swarm", self.launcher.values())
        self.store.set("coding_agents", self.harness.values())
        self.store.set("ab_seconds", self.ab.seconds.value())
        settings = self.service.settings
        self.store.set("engine", settings.engine)
        self.store.set("kv_unified", settings.kv_unified)
        self.store.set("threads", settings.threads or 0)
        self.store.set("extra_buffers", settings.extra_buffers)
        self.store.set("kv_type", settings.kv_type)
        # Empty means the bundled model; "demo" the random-weight one.
        self.store.set("model_path", str(settings.model) if settings.model else "")
        if self.service.loaded:
            self.store.set("scheduler", scheduler_values(self.service.engine_thread.config))
        self.store.set("fleet", self.fleet.active)
        try:
            backends = self.engine_panel.backends.backends()
        except ValueError:
            backends = None  # an unfinished edit must not replace the list remembered
        if backends is not None:
            self.store.set("backends", [format_backend(b) for b in backends])
        self.store.sync()

    def shutdown(self) -> None:
        """Stops the timer, the swarm, the A/B run and the engine; the app stops the HTTP server."""
        self.timer.stop()
        if self.ab.running:
            self.ab.abort()
        self.launcher.stop()  # agents stop asking; stopping the engine below ends their open requests
        self.harness.shutdown()
        try:
            self.save_settings()
        except Exception:  # never let a settings problem keep the engine running
            log.exception("could not save settings")
        self.fleet.stop()
        self.service.stop()

    def raise_dock(self, name: str) -> None:
        dock = self.docks[name]
        dock.show()
        dock.raise_()

    def quit(self) -> None:
        """Quit asked for outright (the menu, the tray): the close guard may still ask, but never offers the tray."""
        self._outright = True
        try:
            self.close()
        finally:
            self._outright = False

    def quit_now(self) -> None:
        """Quits without asking (Ctrl-C in the terminal, a scripted capture, an error on the way)."""
        self._forced = True
        self.close()

    def closeEvent(self, event: QtGui.QCloseEvent) -> None:  # noqa: N802 (Qt API)
        if self.shut:
            event.accept()
            return
        if not self._forced and self.close_guard is not None and not self.close_guard(self._outright):
            event.ignore()
            return
        self.shut = True
        self.shutdown()
        event.accept()
        self.closed.emit()
