"""The main window: composes the panels and owns the one timer that pulls snapshots."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

from PySide6 import QtCore, QtGui, QtWidgets

from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.app.service.step_feed import StepFeed
from swarm_panel.app.settings.schema import scheduler_values
from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.fit import StepLine
from swarm_panel.ui.fleet.fleet_mode import FleetMode
from swarm_panel.ui.panels.ab_run import ABRun
from swarm_panel.ui.panels.agents_panel import AgentsPanel
from swarm_panel.ui.panels.agents_table import with_priority
from swarm_panel.ui.panels.cache_panel import CachePanel
from swarm_panel.ui.panels.controls import SchedulerControls
from swarm_panel.ui.panels.endpoint_panel import EndpointPanel
from swarm_panel.ui.panels.engine_panel import EnginePanel, Loader
from swarm_panel.ui.panels.harness_panel import HarnessPanel
from swarm_panel.ui.panels.swarm_launcher import SwarmLauncher
from swarm_panel.ui.plots.ceiling_plot import CeilingPlot
from swarm_panel.ui.plots.lane_timeline import LaneTimeline
from swarm_panel.ui.plots.live_plots import PLOTS, PlotsPanel
from swarm_panel.ui.plots.service_plot import ServicePlot
from swarm_panel.ui.shell.docks import make_docks
from swarm_panel.ui.shell.export import export_figures, export_png
from swarm_panel.ui.shell.kpi_strip import KpiStrip
from swarm_panel.ui.shell.status_bar import StatusBar
from swarm_panel.ui.shell.window_engine import POLICY_CAPTION, EngineWiring
from swarm_panel.ui.shell.window_life import WindowLife
from swarm_panel.ui.shell.window_refresh import REFRESH_HZ, TimerRefresh
from swarm_panel.ui.shell.window_screen import ScreenFit
from swarm_panel.ui.toolkit import theme
from swarm_panel.ui.toolkit.settings_store import SettingsStore


class MainWindow(TimerRefresh, EngineWiring, ScreenFit, WindowLife, QtWidgets.QMainWindow):
    """The panels composed into docks around the plots; its jobs are in the mixins beside it."""

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

    def raise_dock(self, name: str) -> None:
        dock = self.docks[name]
        dock.show()
        dock.raise_()
