"""Who the card is serving: tokens per second per agent, the fairness index, the last round's makespan.

Fed at the window's slow refresh with cumulative tokens per agent and each agent's open requests.
Rates are taken over the last RATE_WINDOW_S, so a policy switch shows within a few seconds; the
fairness index is Jain's over each agent's service against its max-min fair share of the last
FAIR_WINDOW_S (runtime.policies.fairness), the same figure the benchmarks report.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from swarm_panel.app.service.step_feed import Marker
from swarm_panel.runtime.policies.fairness import ServiceLedger, fairness_figures
from swarm_panel.runtime.serving.metrics import AgentFigures
from swarm_panel.ui.toolkit import theme

SPAN_S = 60.0
MIN_SPAN_S = 10.0
RATE_WINDOW_S = 3.0
FAIR_WINDOW_S = 10.0
TOP_AGENTS = 8
OTHER = "other agents"
PALETTE = ("#f2c14e", "#5aa9e6", "#6fd6b0", "#e07a5f", "#b39ddb", "#ef8fb3", "#c5e17a", "#9ad1d4", "#ffffff")


class ServicePlot(QtWidgets.QGroupBox):
    def __init__(self, parent: QtWidgets.QWidget | None = None, span_s: float = SPAN_S) -> None:
        super().__init__("Service per agent", parent)
        self.span_s = span_s
        self.plot = pg.PlotWidget()
        self.plot.setMinimumHeight(50)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.setMenuEnabled(False)
        self.plot.setLabel("left", "tok/s")
        self.plot.setLabel("bottom", "seconds since the panel opened")
        for axis in ("left", "bottom"):
            self.plot.getAxis(axis).enableAutoSIPrefix(False)
        self.plot.getAxis("left").setWidth(52)
        self.figures = QtWidgets.QLabel("no service yet")
        self.figures.setStyleSheet(f"color: {theme.TEXT}; font-size: 11pt")
        self.figures.setWordWrap(True)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.keys = QtWidgets.QLabel("")
        self.keys.setWordWrap(True)
        self.keys.setStyleSheet("font-size: 9pt")
        layout.addWidget(self.figures)
        layout.addWidget(self.keys)
        layout.addWidget(self.plot, 1)
        self._samples: deque[tuple[float, Counter[str]]] = deque()
        self._rates: dict[str, deque[tuple[float, float]]] = {}
        self._curves: dict[str, pg.PlotDataItem] = {}
        self._colours: dict[str, str] = {}
        self._ledger = ServiceLedger()
        self._fair_marks: deque[tuple[float, Counter[str], Counter[str]]] = deque()
        self.jain: float | None = None
        self.most_served: tuple[str, float] | None = None
        self.makespan: float | None = None
        self._round_text = ""
        self._t_first: float | None = None
        self._marked: set = set()

    # -- feeding -------------------------------------------------------------------------------

    def update_from(self, now: float, agents: list[AgentFigures], open_requests: Mapping[str, int],
                    lanes: int | None, markers: Iterable[Marker] = ()) -> None:
        for marker in markers:
            if id(marker) not in self._marked:
                self.mark(marker.time, marker.label, key=id(marker))
        self.observe(now, {a.agent: a.tokens for a in agents}, open_requests, lanes)

    def mark(self, t: float, label: str, key: object = None) -> None:
        """A dashed line where something changed (a policy switch), as on the other plots."""
        self._marked.add(key if key is not None else (t, label))
        line = pg.InfiniteLine(pos=t, angle=90, movable=False,
                               pen=pg.mkPen(theme.MARKER, width=1.2, style=QtCore.Qt.PenStyle.DashLine), label=label,
                               labelOpts={"position": 0.4, "color": theme.MARKER, "anchors": [(1, 0.5), (1, 0.5)],
                                          "fill": pg.mkBrush(theme.PLOT_BACKGROUND + "d0")})
        self.plot.addItem(line, ignoreBounds=True)

    def observe(self, now: float, tokens: Mapping[str, int], open_requests: Mapping[str, int],
                lanes: int | None) -> None:
        """Cumulative output tokens per agent at `now`, and the requests each has open (its demand)."""
        tokens = Counter(tokens)
        if self._t_first is None:
            self._t_first = now
        if self._samples:
            delta = tokens - self._samples[-1][1]
            self._ledger.lanes = lanes
            self._ledger.set_open(open_requests)
            self._ledger.served_many(delta)
        self._samples.append((now, tokens))
        while len(self._samples) > 2 and self._samples[1][0] <= now - RATE_WINDOW_S:
            self._samples.popleft()
        self._record_rates(now)
        self._record_fairness(now)
        self._redraw(now)

    def show_round(self, record: Mapping) -> None:
        """A critical-path round ended (app.loadgen.swarm's on_round)."""
        self.makespan = float(record["makespan"])
        self._round_text = f"last round's makespan <b>{self.makespan:.1f} s</b>"
        self._show_figures()

    # -- figures -------------------------------------------------------------------------------

    def _record_rates(self, now: float) -> None:
        (t0, first), (t1, last) = self._samples[0], self._samples[-1]
        span = t1 - t0
        rates = {a: (last[a] - first[a]) / span for a in last} if span > 0 else {}
        ranked = sorted(rates, key=lambda a: (-last[a], a))
        shown = ranked[:TOP_AGENTS]
        other = sum(rates[a] for a in ranked[TOP_AGENTS:])
        for agent in shown:
            self._series(agent).append((now, rates[agent]))
        if len(ranked) > TOP_AGENTS:
            self._series(OTHER).append((now, other))
        for agent, series in self._rates.items():
            if agent not in shown and agent != OTHER:
                series.append((now, float("nan")))
            while series and series[0][0] < now - self.span_s:
                series.popleft()

    def _series(self, agent: str) -> deque[tuple[float, float]]:
        if agent not in self._rates:
            self._rates[agent] = deque()
            self._colours[agent] = theme.TEXT_DIM if agent == OTHER else PALETTE[(len(self._colours)) % len(PALETTE)]
        return self._rates[agent]

    def _record_fairness(self, now: float) -> None:
        served, fair = self._ledger.snapshot()
        self._fair_marks.append((now, served, fair))
        while len(self._fair_marks) > 2 and self._fair_marks[1][0] <= now - FAIR_WINDOW_S:
            self._fair_marks.popleft()
        _, served0, fair0 = self._fair_marks[0]
        figures = fairness_figures(served - served0, fair - fair0)
        self.jain = figures["jain"]
        ratios = figures["fair_ratio"]
        self.most_served = max(ratios.items(), key=lambda kv: kv[1]) if ratios else None
        self._show_figures()

    def _show_figures(self) -> None:
        parts = []
        if self.jain is not None:
            parts.append(f"Jain's fairness index <b>{self.jain:.2f}</b> <span style='color:{theme.TEXT_DIM}'>"
                         f"(last {FAIR_WINDOW_S:.0f} s)</span>")
        if self.most_served is not None:
            agent, ratio = self.most_served
            parts.append(f"most served: {agent} at <b>{ratio:.2f}x</b> its fair share")
        if self._round_text:
            parts.append(self._round_text)
        self.figures.setText(" &nbsp;·&nbsp; ".join(parts) or "no service yet")

    def _redraw(self, now: float) -> None:
        for agent, series in self._rates.items():
            curve = self._curves.get(agent)
            if curve is None:
                curve = self.plot.plot(pen=pg.mkPen(self._colours[agent], width=2), connect="finite")
                self._curves[agent] = curve
                self.keys.setText("&nbsp;&nbsp;".join(f"<span style='color:{self._colours[a]}'>━ {a}</span>"
                                                       for a in self._curves))
            t = np.fromiter((p[0] for p in series), float, len(series))
            y = np.fromiter((p[1] for p in series), float, len(series))
            curve.setData(t, y, skipFiniteCheck=False)
        top = max((y for series in self._rates.values() for _, y in series if y == y), default=1.0)
        self.plot.setYRange(0, max(top, 1.0) * 1.1, padding=0)
        first = self._t_first if self._t_first is not None else now
        self.plot.setXRange(min(max(now - self.span_s, first), now - MIN_SPAN_S), now, padding=0)

    def series(self, agent: str) -> list[tuple[float, float]]:
        return list(self._rates.get(agent, ()))
