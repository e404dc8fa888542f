"""A/B run: the same swarm under each policy for a set time, drawn as the article's bottom panel."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from swarm_panel.app.service.step_feed import StepFeed
from swarm_panel.runtime.policies.registry import BATCHING_POLICY_NAMES
from swarm_panel.ui.toolkit import theme


class ABChart(pg.PlotWidget):
    """Horizontal bars, one per policy: useful tok/s, labelled with utilization; the ceiling dashed."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumHeight(150)
        self.setMouseEnabled(x=False, y=False)
        self.hideButtons()
        self.setTitle(f"<span style='color:{theme.TEXT}'>useful tok/s per policy</span>", size="9pt")
        self.setLabel("bottom", "aggregate useful tok/s")
        self.getPlotItem().invertY(True)
        self.getAxis("left").setWidth(100)
        self.getAxis("bottom").enableAutoSIPrefix(False)
        self.placeholder = pg.TextItem("press Run A/B", color=theme.TEXT_DIM, anchor=(0.5, 0.5))
        self.addItem(self.placeholder)
        self.placeholder.setPos(0.5, 1)
        self.setXRange(0, 1, padding=0)
        self.getAxis("left").setTicks([[(k, theme.POLICY_LABELS[p]) for k, p in enumerate(BATCHING_POLICY_NAMES)], []])
        self.setYRange(-0.6, len(BATCHING_POLICY_NAMES) - 0.4, padding=0)
        self._items: list = []
        self.results: list[dict] = []

    def show_results(self, results: list[dict], ceiling: float | None = None) -> None:
        for item in self._items:
            self.removeItem(item)
        self._items = []
        self.results = results
        self.placeholder.setVisible(not results)
        top = max([r["tok_s"] for r in results] + [ceiling or 0.0, 1.0])
        for r in results:
            k = BATCHING_POLICY_NAMES.index(r["policy"])
            colour = theme.POLICY_COLOURS[r["policy"]]
            bar = pg.BarGraphItem(x0=[0], y=[k], width=[r["tok_s"]], height=0.6, brush=colour, pen=pg.mkPen(None))
            util = r.get("utilization", math.nan)
            util_text = f"{100 * util:.0f}% util" if util == util else "no steps"
            text = pg.TextItem(f"{r['tok_s']:.0f} tok/s · {util_text}", color=theme.TEXT, anchor=(0, 0.5))
            text.setPos(r["tok_s"] + top * 0.01, k)
            for item in (bar, text):
                self.addItem(item)
                self._items.append(item)
        if ceiling:
            line = pg.InfiniteLine(pos=ceiling, angle=90, pen=pg.mkPen(theme.MINT, width=1.5,
                                                                        style=QtCore.Qt.PenStyle.DashLine),
                                   label=f"ceiling {ceiling:.0f}", labelOpts={"position": 0.95, "color": theme.MINT})
            self.addItem(line)
            self._items.append(line)
        if results:
            self.setXRange(0, top * 1.45, padding=0)


class ABRun(QtWidgets.QGroupBox):
    """Drives the phases with a QTimer, so it runs under pytest-qt as well as under qasync."""

    finished = QtCore.Signal(list)
    progress = QtCore.Signal(str)

    def __init__(self, feed: StepFeed, apply: Callable[..., object], launcher, current_policy: Callable[[], str],
                 ceiling: Callable[[], float | None], parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("A/B run: the same swarm under each policy", parent)
        self.feed = feed
        self._apply = apply
        self._launcher = launcher
        self._current_policy = current_policy
        self._ceiling = ceiling
        self.seconds = QtWidgets.QSpinBox()
        self.seconds.setRange(2, 600)
        self.seconds.setValue(30)
        self.seconds.setSuffix(" s per policy")
        self.seconds.setToolTip("A naive batch of the article's agents lasts about 23 s; give each policy longer.")
        self.button = QtWidgets.QPushButton("Run A/B")
        self.button.setObjectName("primary")
        self.button.clicked.connect(self.toggle)
        self.status = QtWidgets.QLabel("Runs naive, shrinking and continuous in turn on the launcher's swarm.")
        self.status.setWordWrap(True)
        self.status.setStyleSheet(f"color: {theme.TEXT_DIM}")
        self.chart = ABChart()
        row = QtWidgets.QHBoxLayout()
        row.addWidget(self.seconds)
        row.addWidget(self.button)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.status)
        layout.addWidget(self.chart, 1)
        self._timer = QtCore.QTimer(self)
        self._timer.setInterval(100)
        self._timer.timeout.connect(self._poll)
        self._phases: list[str] = []
        self._phase_start = 0.0
        self._results: list[dict] = []
        self._restore_policy: str | None = None
        self._started_load = False

    @property
    def running(self) -> bool:
        return self._timer.isActive()

    def toggle(self) -> None:
        if self.running:
            self.abort()
        else:
            self.start()

    def start(self, seconds: float | None = None) -> bool:
        if seconds is not None:
            self.seconds.setValue(max(2, round(seconds)))
        self._duration = float(seconds if seconds is not None else self.seconds.value())
        self._restore_policy = self._current_policy()
        self._started_load = False
        if not self._launcher.running:
            if self._launcher.start() is None:
                self.status.setText("Could not start the swarm: see the launcher.")
                return False
            self._started_load = True
        self._phases = list(BATCHING_POLICY_NAMES)
        self._results = []
        self.chart.show_results([])
        self.button.setText("Stop A/B")
        self._begin_phase()
        self._timer.start()
        return True

    def abort(self) -> None:
        self._timer.stop()
        self._end(aborted=True)

    def _begin_phase(self) -> None:
        policy = self._phases[0]
        try:
            self._apply(policy=policy)
        except (ValueError, RuntimeError) as exc:
            self.status.setText(f"A/B stopped: {exc}")
            self.abort()
            return
        self._phase_start = time.monotonic()
        self._report(f"{theme.POLICY_LABELS[policy]}: running ({len(self._results) + 1}/{len(BATCHING_POLICY_NAMES)})")

    def _poll(self) -> None:
        elapsed = time.monotonic() - self._phase_start
        if elapsed < self._duration:
            return
        policy = self._phases.pop(0)
        start = self.feed.axis_time(self._phase_start) + min(2.0, 0.25 * self._duration)
        end = self.feed.axis_time(time.monotonic())
        figures = self.feed.window(start, end)
        self._results.append({"policy": policy, **figures})
        self.chart.show_results(self._results, self._ceiling())
        if self._phases:
            self._begin_phase()
        else:
            self._timer.stop()
            self._end(aborted=False)

    def _end(self, aborted: bool) -> None:
        if self._started_load:
            self._launcher.stop()
        if self._restore_policy:
            try:
                self._apply(policy=self._restore_policy)
            except (ValueError, RuntimeError):
                pass
        self.button.setText("Run A/B")
        if aborted:
            self._report("A/B stopped.")
            return
        summary = ", ".join(f"{theme.POLICY_LABELS[r['policy']]} {r['tok_s']:.0f} tok/s" for r in self._results)
        self._report(f"Done: {summary}")
        self.finished.emit(self._results)

    def _report(self, text: str) -> None:
        self.status.setText(text)
        self.progress.emit(text)
