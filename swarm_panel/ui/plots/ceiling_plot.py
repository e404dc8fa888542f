"""The modeled card's ceiling against context, one curve per KV type, and where the live swarm sits.

Each curve is B/t(B) at the most lanes of that context the card holds (runtime.modeled.ceiling, on the
memory plan): it sags as contexts grow, since fewer lanes fit and each reads more KV a step. The loaded
engine's KV type is drawn bold, with a dashed twin at the panel's own lanes; the marker is the live
swarm's mean context a held sequence and its useful tok/s. Pure arithmetic on the profile: curves are
computed once per profile and lane count, the marker moves at the window's slow refresh.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from swarm_panel.runtime.core.config import MAX_LANES
from swarm_panel.runtime.modeled.ceiling import ceiling
from swarm_panel.runtime.modeled.profiles import CardProfile
from swarm_panel.runtime.planning.memory_plan import KV_TYPES
from swarm_panel.runtime.serving.metrics import MetricsSnapshot
from swarm_panel.ui.toolkit import theme

# Contexts plotted, on a log2 axis: 128 tokens to 64k, four points an octave.
LOG2_LOW, LOG2_HIGH = 7, 16
CONTEXTS = tuple(sorted({round(2 ** (x / 4)) for x in range(4 * LOG2_LOW, 4 * LOG2_HIGH + 1)}))
TICKS = [(x, f"{2 ** x // 1024}k" if x >= 10 else str(2**x)) for x in range(LOG2_LOW, LOG2_HIGH + 1)]
COLOURS = {"f16": theme.QUEUE, "q8_0": theme.USEFUL, "q4_0": theme.MINT}


def _pen(colour: str, width: float, dash: bool = False, alpha: str = ""):
    pen = pg.mkPen(colour + alpha, width=width)
    if dash:
        pen.setStyle(QtCore.Qt.PenStyle.DashLine)
    return pen


class CeilingPlot(QtWidgets.QWidget):
    def __init__(self, profile: CardProfile | None = None, parent: QtWidgets.QWidget | None = None) -> None:
        """`profile`: the card drawn; none draws nothing until `set_profile` (the curves cost some 60 ms)."""
        super().__init__(parent)
        self.header = QtWidgets.QLabel("")
        self.header.setWordWrap(True)
        self.header.setStyleSheet(f"color: {theme.TEXT}; font-size: 10pt")
        self.plot = pg.PlotWidget()
        self.plot.setMinimumHeight(160)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.setMenuEnabled(False)
        self.plot.showGrid(x=True, y=True, alpha=0.15)
        self.plot.setLabel("left", "ceiling B/t(B), tok/s")
        self.plot.setLabel("bottom", "context each sequence holds (tokens, log scale)")
        for axis in ("left", "bottom"):
            self.plot.getAxis(axis).enableAutoSIPrefix(False)
        self.plot.getAxis("left").setWidth(60)
        self.plot.getAxis("bottom").setTicks([TICKS])
        self.plot.setXRange(LOG2_LOW, LOG2_HIGH, padding=0.02)
        self.legend = self.plot.addLegend(offset=(-10, 10), labelTextColor=theme.TEXT, labelTextSize="10pt",
                                          brush=pg.mkBrush(theme.PLOT_BACKGROUND + "d0"), pen=pg.mkPen(theme.GRID))
        self.curves: dict[str, pg.PlotDataItem] = {kv: self.plot.plot(name=kv) for kv in KV_TYPES}
        self.lanes_curve = self.plot.plot(name="lanes")
        self.marker = pg.ScatterPlotItem(size=14, brush=pg.mkBrush(theme.MARKER), pen=pg.mkPen(theme.BACKGROUND, width=2))
        self.plot.addItem(self.marker)
        self.marker_label = pg.TextItem("", color=theme.MARKER, anchor=(0, 1.1),
                                        fill=pg.mkBrush(theme.PLOT_BACKGROUND + "d0"))
        self.plot.addItem(self.marker_label)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.header)
        layout.addWidget(self.plot, 1)
        self.profile: CardProfile | None = None
        self.lanes: int | None = None
        self.swarm: tuple[float, float, int] | None = None  # (mean context, tok/s, lanes held)
        self._tables: dict[str, list[tuple[int, float, int]]] = {kv: [] for kv in KV_TYPES}
        self._lanes_table: list[tuple[int, float, int]] = []
        if profile is not None:
            self.set_profile(profile)

    # -- inputs ----------------------------------------------------------------------------------

    def set_profile(self, profile: CardProfile) -> None:
        """The loaded modeled engine's profile: its KV type is the highlighted curve."""
        same_card = self.profile is not None and profile.with_kv_type(self.profile.kv_type) == self.profile
        self.profile = profile
        if not same_card:
            self._compute_curves()
        self._lanes_table = self._table(self.profile, self.lanes) if self.lanes else []
        self._draw()

    def set_lanes(self, lanes: int | None) -> None:
        """The panel's lanes: the highlighted type's ceiling at that width, dashed."""
        if lanes == self.lanes:
            return
        self.lanes = lanes
        if self.profile is not None:
            self._lanes_table = self._table(self.profile, lanes) if lanes else []
            self._draw()

    def show_swarm(self, snapshot: MetricsSnapshot, state_tokens: int = 0) -> None:
        """Moves the marker to the swarm in `snapshot`: the mean context of the sequences its last step held
        (KV used less each one's recurrent state, over the lanes held) and its useful tok/s."""
        held = snapshot.width_held
        if held <= 0 or snapshot.tok_s <= 0:
            self.swarm = None
        else:
            context = max(snapshot.kv_used / held - state_tokens, 1.0)
            self.swarm = (context, snapshot.tok_s, held)
        self._draw_marker()
        self._draw_header()

    # -- what it shows -------------------------------------------------------------------------

    @property
    def highlighted(self) -> str | None:
        return self.profile.kv_type if self.profile is not None else None

    def marker_position(self) -> tuple[float, float] | None:
        """(context in tokens, tok/s) of the marker, None while hidden."""
        if not self.marker.isVisible() or not len(self.marker.data):
            return None
        x, y = self.marker.getData()
        return 2 ** float(x[0]), float(y[0])

    def curve_names(self) -> list[str]:
        return [kv for kv, curve in self.curves.items() if curve.getData()[0] is not None and curve.isVisible()]

    def ceiling_at(self, kv_type: str, context: float) -> float:
        """The curve's value at `context` (interpolated on the log axis)."""
        table = self._tables[kv_type]
        return float(np.interp(math.log2(context), [math.log2(c) for c, _, _ in table], [t for _, t, _ in table]))

    # -- drawing ---------------------------------------------------------------------------------

    @staticmethod
    def _table(profile: CardProfile, lanes: int = MAX_LANES) -> list[tuple[int, float, int]]:
        points = [ceiling(profile, c, lanes) for c in CONTEXTS]
        return [(p.context, p.tok_s, p.lanes) for p in points if p.lanes]

    def _compute_curves(self) -> None:
        self._tables = {kv: self._table(self.profile.with_kv_type(kv)) for kv in KV_TYPES}

    def _draw(self) -> None:
        self.legend.clear()
        for kv, curve in self.curves.items():
            table = self._tables[kv]
            selected = kv == self.highlighted
            curve.setData([math.log2(c) for c, _, _ in table], [t for _, t, _ in table])
            curve.setPen(_pen(COLOURS[kv], 3.5 if selected else 1.8, alpha="" if selected else "a0"))
            curve.setZValue(2 if selected else 1)
            self.legend.addItem(curve, f"{kv} KV" + ("  (loaded)" if selected else ""))
        if self._lanes_table:
            self.lanes_curve.setData([math.log2(c) for c, _, _ in self._lanes_table],
                                     [t for _, t, _ in self._lanes_table])
            self.lanes_curve.setPen(_pen(COLOURS[self.highlighted], 2.0, dash=True))
            self.legend.addItem(self.lanes_curve, f"{self.highlighted} KV at the panel's {self.lanes} lanes")
            self.lanes_curve.show()
        else:
            self.lanes_curve.hide()
        top = max((t for table in self._tables.values() for _, t, _ in table), default=1.0)
        self.plot.setYRange(0, top * 1.08, padding=0)
        self._draw_marker()
        self._draw_header()

    def _draw_marker(self) -> None:
        if self.swarm is None:
            self.marker.hide()
            self.marker_label.hide()
            return
        context, tok_s, held = self.swarm
        x = min(max(math.log2(context), LOG2_LOW), LOG2_HIGH)
        self.marker.setData([x], [tok_s])
        self.marker.show()
        self.marker_label.setText(f"the swarm: {tok_s:,.0f} tok/s, {held} lanes at {context:,.0f} tokens")
        # Left of the marker near the right edge, so the label stays inside the plot.
        self.marker_label.setAnchor((1, 1.1) if x > LOG2_HIGH - 2 else (0, 1.1))
        self.marker_label.setPos(x, tok_s)
        self.marker_label.show()

    def _draw_header(self) -> None:
        p = self.profile
        if p is None:
            self.header.setText("")
            return
        text = (f"<b>Ceiling against context</b>, modeled {p.card}, {p.model}: B/t(B) at the most lanes of each "
                f"context that fit in {p.vram_gib:g} GiB. Longer contexts fit fewer lanes and each lane reads more KV "
                f"a step; quantized KV holds more tokens and reads fewer bytes.")
        if self.swarm is not None:
            context, tok_s, held = self.swarm
            here = ceiling(p, max(round(context), 1), held)
            text += (f"<br>The swarm: <b>{tok_s:,.0f} tok/s</b> over {held} lanes at {context:,.0f} tokens, against "
                     f"the {p.kv_type} ceiling of {here.tok_s:,.0f} at those lanes and "
                     f"{self.ceiling_at(p.kv_type, context):,.0f} at the most that fit there.")
        self.header.setText(text)
