"""The side panels as docks the user can close, float, reorder and tab, and their first arrangement.

Every box but the agents (whose table scrolls by itself) sits in a scroll area, so a box taller than
its dock scrolls instead of drawing its widgets over each other. The docks' object names key their
place in QMainWindow.saveState, so they must not change.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6 import QtCore, QtWidgets

LEFT = QtCore.Qt.DockWidgetArea.LeftDockWidgetArea
RIGHT = QtCore.Qt.DockWidgetArea.RightDockWidgetArea
LEFT_WIDTH = 290
RIGHT_WIDTH = 430


class VerticalScroll(QtWidgets.QScrollArea):
    """Scrolls a box taller than its dock; as wide as the box needs, so it never cuts the box's width."""

    def __init__(self, box: QtWidgets.QWidget) -> None:
        super().__init__()
        self.setWidgetResizable(True)
        self.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWidget(box)

    def minimumSizeHint(self) -> QtCore.QSize:  # noqa: N802 (Qt API)
        bar = self.verticalScrollBar().sizeHint().width()
        return QtCore.QSize(self.widget().minimumSizeHint().width() + bar, super().minimumSizeHint().height())

    def sizeHint(self) -> QtCore.QSize:  # noqa: N802 (Qt API)
        hint = self.widget().sizeHint()
        return QtCore.QSize(hint.width() + self.verticalScrollBar().sizeHint().width(), hint.height())


@dataclass(frozen=True, slots=True)
class DockSpec:
    key: str  # the object name saveState keys it by
    title: str
    area: QtCore.Qt.DockWidgetArea
    scrolls: bool = True


DOCKS = (
    DockSpec("knobs", "Scheduler knobs", LEFT),
    DockSpec("launcher", "Swarm launcher", LEFT),
    DockSpec("ab", "A/B run: the same swarm under each policy", LEFT),
    DockSpec("engine", "Engine and model", RIGHT),
    DockSpec("cache", "Prefix cache", RIGHT),
    DockSpec("endpoint", "Endpoint (OpenAI-compatible)", RIGHT),
    DockSpec("coding", "Coding agents", RIGHT),
    DockSpec("agents", "Agents", RIGHT, scrolls=False),
)
# Stacked one above the other on a roomy screen: lists of docks tabbed together, top to bottom.
ROOMY = {LEFT: (("knobs",), ("launcher",), ("ab",)),
         RIGHT: (("engine",), ("cache",), ("endpoint", "coding"), ("agents",))}
# On a small one the secondary boxes share a tab group, so the primary ones keep their height.
SMALL = {LEFT: (("knobs",), ("launcher", "ab")),
         RIGHT: (("engine", "cache", "endpoint", "coding"), ("agents",))}


def make_docks(window: QtWidgets.QMainWindow, boxes: dict[str, QtWidgets.QWidget]) -> dict[str, QtWidgets.QDockWidget]:
    docks = {}
    for spec in DOCKS:
        box = boxes[spec.key]
        if isinstance(box, QtWidgets.QGroupBox):
            box.setTitle("")  # the dock's title bar names it
        dock = QtWidgets.QDockWidget(spec.title, window)
        dock.setObjectName(spec.key)
        dock.setFeatures(QtWidgets.QDockWidget.DockWidgetFeature.DockWidgetClosable
                         | QtWidgets.QDockWidget.DockWidgetFeature.DockWidgetMovable
                         | QtWidgets.QDockWidget.DockWidgetFeature.DockWidgetFloatable)
        if spec.scrolls:
            dock.setWidget(VerticalScroll(box))
        else:
            dock.setWidget(box)
        docks[spec.key] = dock
    return docks


def arrange(window: QtWidgets.QMainWindow, docks: dict[str, QtWidgets.QDockWidget], roomy: bool) -> None:
    """The first launch's arrangement on this screen (also the View menu's reset)."""
    plan = ROOMY if roomy else SMALL
    for area, groups in plan.items():
        for group in groups:
            first = docks[group[0]]
            window.addDockWidget(area, first, QtCore.Qt.Orientation.Vertical)
            for key in group[1:]:
                window.tabifyDockWidget(first, docks[key])
    for dock in docks.values():
        dock.setFloating(False)
        dock.show()
    for groups in plan.values():
        for group in groups:
            docks[group[0]].raise_()


def size_docks(window: QtWidgets.QMainWindow, docks: dict[str, QtWidgets.QDockWidget]) -> None:
    """The first arrangement's widths and heights, once the window has its size on the screen."""
    window.resizeDocks([docks["knobs"], docks["engine"]], [LEFT_WIDTH, RIGHT_WIDTH], QtCore.Qt.Orientation.Horizontal)
    # The knobs their own height, the agents about half their column: the rest to the launcher and the engine.
    knobs = docks["knobs"].widget().sizeHint().height() + 30
    window.resizeDocks([docks["knobs"], docks["agents"]], [knobs, window.height() * 62 // 100], QtCore.Qt.Orientation.Vertical)
