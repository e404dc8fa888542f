"""The lane timeline: one row per lane, one column per recent step, coloured by what the lane did.

Drawn as one RGB image (pg.ImageItem) rebuilt from the feed's lane ring each refresh; padding is
hatched with diagonal stripes that scroll with the data, so a static batch's dead tail is unmistakable.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from swarm_panel.app.service.step_feed import (
    CODE_DECODE,
    CODE_IDLE,
    CODE_PADDING,
    CODE_PREFILL,
    CODE_STALLED,
    Marker,
    StepFeed,
)
from swarm_panel.ui.toolkit import theme

SUBROWS = 6  # image pixels per lane; the first is a thin gap between lanes
HATCH = 5  # code of the dark hatch stripes
GAP = 6


def _rgb(colour: str) -> tuple[int, int, int]:
    c = QtGui.QColor(colour)
    return c.red(), c.green(), c.blue()


LUT = np.array([_rgb(c) for c in (theme.IDLE, theme.USEFUL, theme.PREFILL, theme.PADDING, theme.STALLED,
                                  theme.PADDING_DARK, theme.LANE_GAP)], dtype=np.uint8)
# The same colours as packed RGBA words: one np.take builds the image (much faster than LUT[img]).
LUT_RGBA32 = np.concatenate([LUT, np.full((len(LUT), 1), 255, dtype=np.uint8)], axis=1).copy().view(np.uint32)[:, 0]
assert (CODE_IDLE, CODE_DECODE, CODE_PREFILL, CODE_PADDING, CODE_STALLED) == (0, 1, 2, 3, 4)


def legend_html() -> str:
    items = ((theme.USEFUL, "■", "useful decode"), (theme.PREFILL, "■", "prefill chunk"),
             (theme.PADDING, "■", "padding (hatched)"), (theme.STALLED, "■", "stalled"),
             # Idle is nearly the background: an outline reads where a filled square would vanish.
             (theme.TEXT_DIM, "□", "idle"))
    return "&nbsp;&nbsp;".join(
        f"<span style='color:{c}; font-size:13pt'>{mark}</span> <span style='color:{theme.TEXT_DIM}'>{name}</span>"
        for c, mark, name in items
    )


def subrows_for(lanes: int) -> int:
    """Image pixels per lane: enough for a gap and a visible hatch, no more than the screen shows."""
    return max(3, min(SUBROWS, 384 // max(lanes, 1)))


_HATCH_CACHE: dict[tuple[int, int, int], np.ndarray] = {}


def _hatch(lanes: int, subrows: int, width: int) -> np.ndarray:
    """Diagonal stripes for `width + 8` columns; slice at the first column's phase so they scroll with the data."""
    key = (lanes, subrows, width)
    pattern = _HATCH_CACHE.get(key)
    if pattern is None:
        sub = np.tile(np.arange(subrows), lanes)[:, None]
        cols = np.arange(width + 8)[None, :]
        pattern = _HATCH_CACHE[key] = ((cols + 2 * sub) % 8) >= 4
    return pattern


def render(codes: np.ndarray, first_column: int, subrows: int = SUBROWS) -> np.ndarray:
    """codes (steps, lanes) oldest first -> RGBA image (lanes * subrows, steps, 4), lane 0 on top."""
    steps, lanes = codes.shape
    img = np.repeat(codes.T, subrows, axis=0)
    padding = img == CODE_PADDING
    if padding.any():
        phase = first_column % 8
        padding &= _hatch(lanes, subrows, steps)[:, phase : phase + steps]
        img[padding] = HATCH
    img[0::subrows] = GAP
    return np.take(LUT_RGBA32, img).view(np.uint8).reshape(img.shape[0], steps, 4)


class LaneTimeline(QtWidgets.QWidget):
    lane_clicked = QtCore.Signal(int)

    def __init__(self, parent: QtWidgets.QWidget | None = None, columns: int = 900) -> None:
        super().__init__(parent)
        self.columns = columns
        self.header = QtWidgets.QLabel()
        self.header.setTextFormat(QtCore.Qt.TextFormat.RichText)
        # A long header must not widen the window: it is cut, the plot below keeps its width.
        self.header.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        self.header.setWordWrap(True)
        legend = QtWidgets.QLabel(legend_html())
        legend.setTextFormat(QtCore.Qt.TextFormat.RichText)
        legend.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        legend.setAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.setMinimumHeight(80)
        self.plot = self.graphics.addPlot()
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.invertY(True)
        self.plot.setLabel("bottom", "steps (newest on the right)")
        self.plot.setLabel("left", "lane")
        self.plot.getAxis("left").setWidth(48)
        for axis in ("left", "bottom"):
            self.plot.getAxis(axis).enableAutoSIPrefix(False)
        self.plot.setMenuEnabled(False)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        self.graphics.setToolTip("click a lane to watch the agent in it")
        self.plot.scene().sigMouseClicked.connect(self._clicked)
        legend.setAlignment(QtCore.Qt.AlignmentFlag.AlignLeft | QtCore.Qt.AlignmentFlag.AlignVCenter)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        # A row each: the header's figures and the legend both read whole on a narrow centre.
        layout.addWidget(self.header)
        layout.addWidget(legend)
        layout.addWidget(self.graphics, 1)
        self._lanes_shown = 0
        self._marker_lines: list[tuple[Marker, pg.InfiniteLine]] = []
        self.last_image: np.ndarray | None = None
        self.padding_share = 0.0

    def lane_at(self, scene_pos: QtCore.QPointF) -> int | None:
        if not self.plot.sceneBoundingRect().contains(scene_pos):
            return None
        lane = int(self.plot.vb.mapSceneToView(scene_pos).y())
        return lane if 0 <= lane < max(self._lanes_shown, 1) else None

    def _clicked(self, event) -> None:
        lane = self.lane_at(event.scenePos())
        if lane is not None:
            self.lane_clicked.emit(lane)

    def refresh(self, feed: StepFeed, policy: str = "") -> None:
        ring = feed.lanes
        n = min(len(ring), self.columns)
        lanes = feed.lanes_seen
        end = ring.count
        start = end - n
        if n:
            codes = ring.rows(n)[:, :lanes]
            self.last_image = render(codes, start, subrows_for(lanes))
            self.image.setImage(self.last_image, autoLevels=False)
            self.image.setRect(QtCore.QRectF(start, 0, n, lanes))
            occupied = np.count_nonzero(codes)
            self.padding_share = np.count_nonzero(codes == CODE_PADDING) / occupied if occupied else 0.0
        visible = max(120, min(self.columns, end))  # a fresh run fills the strip instead of a sliver at the right
        self.plot.setXRange(end - visible, end, padding=0)
        if lanes != self._lanes_shown:
            self._lanes_shown = lanes
            self.plot.setYRange(0, lanes, padding=0)
            every = 1 if lanes <= 16 else 4 if lanes <= 64 else 16
            self.plot.getAxis("left").setTicks([[(k + 0.5, str(k)) for k in range(0, lanes, every)], []])
        name = theme.POLICY_LABELS.get(policy, policy)
        colour = theme.POLICY_COLOURS.get(policy, theme.TEXT)
        dim = f"<span style='color:{theme.TEXT_DIM}'>"
        padding = (f"{dim}padding:</span> <b>{100 * self.padding_share:.0f}%</b> {dim}of the lane slots held over the "
                   f"last {n:,} steps</span>" if n else f"{dim}no steps yet</span>")
        self.header.setText(f"<b>Lane timeline</b> &nbsp; <span style='color:{colour}'><b>{name}</b></span>"
                            f" &nbsp; {padding}")
        self._sync_markers(feed.markers, end - self.columns)

    def _sync_markers(self, markers: list[Marker], oldest: int) -> None:
        known = {id(m) for m, _ in self._marker_lines}
        for marker in markers:
            if id(marker) not in known and marker.column >= oldest:
                line = pg.InfiniteLine(pos=marker.column, angle=90, movable=False,
                                       pen=pg.mkPen(theme.MARKER, width=1.5, style=QtCore.Qt.PenStyle.DashLine),
                                       label=marker.label,
                                       labelOpts={"position": 0.1, "color": theme.MARKER,
                                                  "anchors": [(1, 0.5), (1, 0.5)],
                                                  "fill": pg.mkBrush(theme.PLOT_BACKGROUND + "d0")})
                self.plot.addItem(line, ignoreBounds=True)
                self._marker_lines.append((marker, line))
        keep = []
        for marker, line in self._marker_lines:
            if marker.column < oldest:
                self.plot.removeItem(line)
            else:
                keep.append((marker, line))
        self._marker_lines = keep
