"""The fleet: each remote backend's occupancy, queue, KV, tok/s and prefix hit rate, one line each plus the total.

Backend figures arrive at the poll rate (about 1 Hz), so the panel redraws on its own slow timer
from the poller's history; it never waits on a backend. A backend that is down draws a gap and says
why; a figure a backend does not export (llama-server's KV) is written "not reported", not drawn.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from swarm_panel.app.gateway.backend_poller import Backend, Point
from swarm_panel.ui.toolkit import theme

REFRESH_MS = 1000
SPAN_S = 120.0
BACKEND_COLOURS = (theme.USEFUL, theme.PREFILL, theme.KV, theme.QUEUE, theme.MINT, "#f28ab2", "#a0d468", "#c8b06e")
FLEET_COLOUR = theme.TEXT

# plot key -> (title, units)
PLOTS: dict[str, tuple[str, str]] = {
    "occupancy": ("Occupancy", "% of slots"),
    "waiting": ("Waiting (in the backend's own queue)", "requests"),
    "kv": ("KV cache usage", "%"),
    "tok_s": ("Throughput", "tok/s"),
    "hit_rate": ("Prefix cache hit rate", "%"),
}


def point_values(p: Point) -> dict[str, float]:
    return {"occupancy": 100 * p.running / p.slots if p.slots else math.nan, "waiting": p.waiting,
            "kv": 100 * p.kv_usage, "tok_s": p.tok_s, "hit_rate": 100 * p.hit_rate}


def fleet_values(latest: Sequence[Point]) -> dict[str, float]:
    """The fleet total over backends that answered: counts summed, KV and hit rate averaged where reported."""
    live = [p for p in latest if not math.isnan(p.running)]
    if not live:
        return dict.fromkeys(PLOTS, math.nan)
    slots = sum(p.slots for p in live)

    def mean(values: list[float]) -> float:
        values = [v for v in values if not math.isnan(v)]
        return sum(values) / len(values) if values else math.nan

    tok = [p.tok_s for p in live if not math.isnan(p.tok_s)]
    return {"occupancy": 100 * sum(p.running for p in live) / slots if slots else math.nan,
            "waiting": sum(p.waiting for p in live), "kv": 100 * mean([p.kv_usage for p in live]),
            "tok_s": sum(tok) if tok else math.nan, "hit_rate": 100 * mean([p.hit_rate for p in live])}


class FleetPanel(QtWidgets.QGroupBox):
    """Plots for the backends; `set_policy`/`set_routing` (the gateway's) fill the switches when given."""

    def __init__(self, backends: list[Backend], set_policy: Callable[[str], None] | None = None,
                 set_routing: Callable[[str], None] | None = None, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("Fleet: remote backends", parent)
        self.backends = backends
        self.t0 = time.monotonic()
        self.fleet: deque[tuple[float, dict[str, float]]] = deque(maxlen=3600)
        self.colours = {b.label: BACKEND_COLOURS[i % len(BACKEND_COLOURS)] for i, b in enumerate(backends)}
        self.status = QtWidgets.QLabel("")
        self.status.setTextFormat(QtCore.Qt.TextFormat.RichText)
        self.status.setWordWrap(True)
        self.layout_widget = pg.GraphicsLayoutWidget()
        self.layout_widget.setMinimumHeight(300)  # within a 1,280 x 720 screen's window
        self.plots: dict[str, pg.PlotItem] = {}
        self.curves: dict[tuple[str, str], pg.PlotDataItem] = {}
        self.notes: dict[str, pg.TextItem] = {}
        self._build_plots()
        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(self._switches(set_policy, set_routing))
        layout.addWidget(self.status)
        layout.addWidget(self.layout_widget, 1)
        self.timer = QtCore.QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh)
        self.timer.start()

    def _switches(self, set_policy, set_routing) -> QtWidgets.QHBoxLayout:
        row = QtWidgets.QHBoxLayout()
        for caption, choices, apply in (("gateway admission", ("first-come", "fewest-in-flight"), set_policy),
                                        ("routing", ("affinity", "round-robin"), set_routing)):
            if apply is None:
                continue
            box = QtWidgets.QComboBox()
            box.addItems(choices)
            box.currentTextChanged.connect(apply)
            row.addWidget(QtWidgets.QLabel(caption))
            row.addWidget(box)
            setattr(self, caption.split()[-1] + "_choice", box)
        row.addStretch(1)
        return row

    def _build_plots(self) -> None:
        keys = " ".join(f"<span style='color:{self.colours[b.label]}'>━ {b.label}</span>" for b in self.backends)
        keys += f" <span style='color:{FLEET_COLOUR}'>┅ fleet total</span>"
        for row, (key, (title, units)) in enumerate(PLOTS.items()):
            plot = self.layout_widget.addPlot(row=row, col=0)
            plot.setTitle(f"<b>{title}</b>&nbsp;&nbsp;{keys}" if row == 0 else f"<b>{title}</b>", size="9pt")
            plot.setLabel("left", units)
            plot.setMouseEnabled(x=False, y=False)
            plot.hideButtons()
            plot.setMenuEnabled(False)
            plot.getAxis("left").setWidth(52)
            plot.getAxis("left").enableAutoSIPrefix(False)  # an idle fleet's zeros read "x0.001" otherwise
            # Counts and rates are never negative; an all-zero line still gets a readable axis.
            plot.setLimits(yMin=0, minYRange=1)
            if row < len(PLOTS) - 1:
                plot.hideAxis("bottom")
            else:
                plot.setLabel("bottom", "seconds since the panel opened")
            for b in self.backends:
                self.curves[(key, b.label)] = plot.plot(pen=pg.mkPen(self.colours[b.label], width=2), connect="finite")
            fleet_pen = pg.mkPen(FLEET_COLOUR, width=2.5, style=QtCore.Qt.PenStyle.DashLine)
            self.curves[(key, "fleet")] = plot.plot(pen=fleet_pen, connect="finite")
            note = pg.TextItem("", color=theme.TEXT_DIM, anchor=(0, 0))
            note.setParentItem(plot.getViewBox())
            note.setPos(6, 2)
            self.notes[key] = note
            self.plots[key] = plot
        for key in ("occupancy", "hit_rate"):
            self.plots[key].setYRange(0, 105, padding=0)
            self.plots[key].enableAutoRange(axis="y", enable=False)

    def refresh(self) -> None:
        now = time.monotonic()
        latest = [b.history[-1] for b in self.backends if b.history]
        self.fleet.append((now - self.t0, fleet_values(latest)))
        for b in self.backends:
            points = [p for p in b.history if p.t >= self.t0]
            t = np.array([p.t - self.t0 for p in points])
            values = [point_values(p) for p in points]
            for key in PLOTS:
                self.curves[(key, b.label)].setData(t, np.array([v[key] for v in values]), skipFiniteCheck=False)
        t = np.array([x for x, _ in self.fleet])
        for key in PLOTS:
            self.curves[(key, "fleet")].setData(t, np.array([v[key] for _, v in self.fleet]), skipFiniteCheck=False)
        end = now - self.t0
        for plot in self.plots.values():
            plot.setXRange(max(0.0, end - SPAN_S), max(end, 10.0), padding=0)
        unreported = [b.label for b in self.backends if b.up and b.sample is not None and b.sample.kv_usage is None]
        self.notes["kv"].setText(f"{', '.join(unreported)}: not reported" if unreported else "")
        self.status.setText(" &nbsp;·&nbsp; ".join(self._describe(b) for b in self.backends))

    def _describe(self, b: Backend) -> str:
        colour = self.colours[b.label]
        if b.up is None:
            state = "polling…"
        elif not b.up:
            state = f"<span style='color:#ff8a80'>down: {b.error}</span>"
        else:
            running = int(b.sample.running) if b.sample else 0
            state = f"up, {running}/{b.slots} slots ({b.slots_source}), {b.inflight} from the gateway"
        return f"<span style='color:{colour}'><b>{b.label}</b></span> {b.kind}: {state}"

    def series(self, key: str, label: str) -> np.ndarray:
        data = self.curves[(key, label)].getData()[1]
        return np.array([]) if data is None else data
