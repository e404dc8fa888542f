"""The live plots on one time axis: throughput, batch occupancy, KV, utilization.

Nothing here is driven per token: `refresh(feed)` is called by the window's one timer and hands the
feed's ring-buffer views, cut to the visible window, to `setData`. The plots are not x-linked (each
gets the same range directly), which keeps one refresh to a few milliseconds.

Each plot is a widget of its own in a splitter: they share the height with a minimum each, the user
can drag the handles, and a plot hidden from the View menu gives its room to the others.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from swarm_panel.app.service.step_feed import Marker, StepFeed
from swarm_panel.ui.toolkit import theme

SPAN_S = 60.0
MIN_SPAN_S = 20.0
# Logical pixels: a title line and a few grid steps.
MIN_PLOT_HEIGHT = 64
TIME_AXIS_HEIGHT = 36  # the lowest plot's extra: the time axis and its label
# Heights along a marker's line (0 bottom, 1 top) for its label, taken in turn.
MARKER_ROWS = (0.78, 0.45)

# plot -> (title, units, [(tick column, legend label, colour, dashed, width, filled)])
PLOTS = {
    "throughput": ("Throughput", "tok/s", [
        ("tok_s", "useful tok/s", theme.USEFUL, False, 2.0, True),
        ("padding_tok_s", "padding tok/s", theme.PADDING, False, 2.0, False),
        ("ceiling", "ceiling B/t(B)", theme.MINT, True, 1.5, False)]),
    "occupancy": ("Batch occupancy", "lanes", [
        ("held", "width held", theme.TEXT, False, 1.5, False),
        ("live", "live lanes", theme.USEFUL, False, 2.0, False),
        ("padding", "padding lanes", theme.PADDING, False, 2.0, False),
        ("queue", "waiting queue", theme.QUEUE, True, 1.5, False)]),
    "kv": ("KV cache", "KV %", [
        ("kv_pct", "live KV %", theme.KV, False, 2.0, True),
        ("kv_cached_pct", "cached for reuse %", theme.PREFILL, True, 1.5, False),
        # A hybrid model's recurrent-state checkpoints, as a share of their own memory budget.
        ("checkpoint_pct", "checkpoints % of budget", theme.QUEUE, True, 1.5, False),
        # Finished sequences parked in host RAM out of a unified KV, as a share of their own budget.
        ("parked_pct", "parked % of budget", theme.TEXT_DIM, True, 1.5, False)]),
    "utilization": ("Utilization", "%", [
        ("utilization", "utilization (useful / width held)", theme.MINT, False, 2.0, False),
        ("occupancy", "occupancy (live / lanes)", theme.USEFUL, True, 1.5, False)]),
}


def _pen(colour: str, width: float = 2.0, dash: bool = False):
    pen = pg.mkPen(colour, width=width)
    if dash:
        pen.setStyle(QtCore.Qt.PenStyle.DashLine)
    return pen


def _title(title: str, curves) -> str:
    keys = "&nbsp;&nbsp;".join(
        f"<span style='color:{colour}'>{'┅' if dashed else '━'} {label}</span>"
        for _, label, colour, dashed, _, _ in curves
    )
    return f"<span style='color:{theme.TEXT}'><b>{title}</b></span>&nbsp;&nbsp;&nbsp;{keys}"


class PlotsPanel(QtWidgets.QWidget):
    def __init__(self, parent: QtWidgets.QWidget | None = None, span_s: float = SPAN_S) -> None:
        super().__init__(parent)
        self.span_s = span_s
        self.splitter = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setHandleWidth(3)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.splitter)
        self.widgets: dict[str, pg.PlotWidget] = {}
        self.plots: dict[str, pg.PlotItem] = {}
        self.curves: dict[str, pg.PlotDataItem] = {}
        for name, (title, units, curves) in PLOTS.items():
            widget = pg.PlotWidget()
            widget.setMinimumHeight(MIN_PLOT_HEIGHT)
            widget.setSizePolicy(QtWidgets.QSizePolicy.Policy.Expanding, QtWidgets.QSizePolicy.Policy.Expanding)
            plot = widget.getPlotItem()
            plot.setTitle(_title(title, curves), size="9pt")
            plot.showGrid(x=False, y=False)
            plot.setLabel("left", units)
            plot.setMouseEnabled(x=False, y=False)
            plot.hideButtons()
            plot.setMenuEnabled(False)
            for axis in ("left", "bottom"):
                plot.getAxis(axis).enableAutoSIPrefix(False)
            plot.getAxis("left").setWidth(52)
            plot.enableAutoRange(axis="x", enable=False)
            for key, _, colour, dashed, width, filled in curves:
                curve = plot.plot(pen=_pen(colour, width, dashed), connect="finite")
                if filled:
                    curve.setFillLevel(0)
                    curve.setBrush(pg.mkBrush(colour + "38"))
                self.curves[key] = curve
            self.splitter.addWidget(widget)
            self.splitter.setStretchFactor(self.splitter.count() - 1, 1)
            self.widgets[name] = widget
            self.plots[name] = plot
        self._time_axis_on_the_lowest()
        self.plots["utilization"].setYRange(0, 105, padding=0)
        self.plots["utilization"].enableAutoRange(axis="y", enable=False)
        self.plots["kv"].enableAutoRange(axis="y", enable=False)
        # The KV figures in words, a second title line: inside the plot they would sit on the curves and markers.
        self.kv_summary = ""
        self._kv_top = 0.0
        self._marker_lines: list[tuple[Marker, list[pg.InfiniteLine]]] = []

    def set_plot_shown(self, name: str, shown: bool) -> None:
        """Hides or shows one plot; the others share its height."""
        self.widgets[name].setVisible(shown)
        self._time_axis_on_the_lowest()
        self._label_markers_on_the_highest()

    def shown_plots(self) -> list[str]:
        return [name for name, widget in self.widgets.items() if not widget.isHidden()]

    def _time_axis_on_the_lowest(self) -> None:
        """One time axis, under the lowest plot shown; the others' would only cost paint time and height."""
        shown = self.shown_plots()
        for name, plot in self.plots.items():
            lowest = bool(shown) and name == shown[-1]
            self.widgets[name].setMinimumHeight(MIN_PLOT_HEIGHT + (TIME_AXIS_HEIGHT if lowest else 0))
            plot.getAxis("bottom").setLabel("seconds since the panel opened" if lowest else "")
            plot.showAxis("bottom", lowest)

    def refresh(self, feed: StepFeed, now: float | None = None) -> None:
        ticks = feed.ticks
        if not len(ticks):
            return
        t = ticks.column("t")
        end = float(t[-1]) if now is None else now
        if feed.markers:
            # A marker set since the last tick stands right of it; the axis reaches it so its line and its
            # label (drawn left of the line) stay inside the plot.
            end = max(end, feed.markers[-1].time)
        start = max(end - self.span_s, min(float(t[0]), end - MIN_SPAN_S))
        lo = max(int(np.searchsorted(t, start)) - 1, 0)
        t_visible = t[lo:]
        for key, curve in self.curves.items():
            curve.setData(t_visible, ticks.column(key)[lo:], skipFiniteCheck=False)
        for plot in self.plots.values():
            plot.setXRange(start, end, padding=0)
        kv = np.concatenate((ticks.column("kv_pct")[lo:], ticks.column("kv_cached_pct")[lo:],
                             ticks.column("checkpoint_pct")[lo:], ticks.column("parked_pct")[lo:]))
        top = max(2.0, float(np.nanmax(kv)) * 1.3 if len(kv) else 2.0)
        if not math.isclose(top, self._kv_top, rel_tol=0.15):
            self._kv_top = min(top, 100.0)
            self.plots["kv"].setYRange(0, self._kv_top, padding=0)
        kv_used = feed.latest("kv_used")
        if not math.isnan(kv_used):
            capacity = feed.steps.column("kv_capacity", 1)
            cap = int(capacity[0]) if len(capacity) else 0
            cached = int(feed.latest("kv_cached"))
            text = f"tokens: {int(kv_used):,} live + {cached:,} cached of {cap:,} ({feed.latest('kv_pct'):.1f}% live)"
            checkpoint_bytes = feed.steps.column("checkpoint_bytes", 1)
            if len(checkpoint_bytes) and checkpoint_bytes[0] > 0:
                text += f" · checkpoints {checkpoint_bytes[0] / 1e6:,.1f} MB"
            parked_bytes = feed.steps.column("parked_bytes", 1)
            if len(parked_bytes) and parked_bytes[0] > 0:
                text += f" · parked {parked_bytes[0] / 1e6:,.1f} MB in host RAM"
            if text != self.kv_summary:
                self.kv_summary = text
                title, _, curves = PLOTS["kv"]
                summary = f"<span style='color:{theme.TEXT_DIM}'>{text}</span>"
                self.plots["kv"].setTitle(f"{_title(title, curves)}<br>{summary}", size="9pt")
        self._sync_markers(feed.markers, start)

    def _sync_markers(self, markers: list[Marker], oldest: float) -> None:
        known = {id(m) for m, _ in self._marker_lines}
        for marker in markers[-20:]:
            if id(marker) not in known and marker.time >= oldest:
                # Each marker's label one row lower than the last one's, so labels of markers close in time
                # stand apart instead of on each other.
                row = len(self._marker_lines) % len(MARKER_ROWS)
                self._marker_lines.append((marker, [self._marker_line(plot, marker, MARKER_ROWS[row])
                                                    for plot in self.plots.values()]))
                self._label_markers_on_the_highest()
        keep = []
        for marker, lines in self._marker_lines:
            if marker.time < oldest - 1.0:
                for plot, line in zip(self.plots.values(), lines):
                    plot.removeItem(line)
            else:
                keep.append((marker, lines))
        self._marker_lines = keep

    def _label_markers_on_the_highest(self) -> None:
        """A marker's line crosses every plot, its label only the highest one shown: one label per event,
        with the room of one plot's height to stand apart from the next marker's."""
        shown = self.shown_plots()
        for _, lines in self._marker_lines:
            for name, line in zip(self.plots, lines):
                line.label.setVisible(bool(shown) and name == shown[0])

    @staticmethod
    def _marker_line(plot: pg.PlotItem, marker: Marker, position: float) -> pg.InfiniteLine:
        # Always left of its line (both anchors on the label's right edge): a marker just set sits at the plot's
        # right end, where a label on its right would be cut off.
        line = pg.InfiniteLine(
            pos=marker.time, angle=90, movable=False, pen=_pen(theme.MARKER, 1.5, dash=True),
            label=marker.label,
            labelOpts={"position": position, "color": theme.MARKER, "anchors": [(1, 0.5), (1, 0.5)],
                       "fill": pg.mkBrush(theme.PLOT_BACKGROUND + "d0")},
        )
        plot.addItem(line, ignoreBounds=True)
        return line

    def text_items(self, name: str) -> list[QtWidgets.QGraphicsItem]:
        """The plot's visible words: its title and its markers' labels (for checks that none covers another)."""
        plot = self.plots[name]
        index = list(self.plots).index(name)
        items = [plot.titleLabel.item, *(lines[index].label for _, lines in self._marker_lines)]
        return [item for item in items if item.isVisible()]

    def marker_labels(self) -> list[str]:
        return [marker.label for marker, _ in self._marker_lines]

    def series(self, key: str) -> np.ndarray:
        data = self.curves[key].getData()[1]
        return np.array([]) if data is None else data
