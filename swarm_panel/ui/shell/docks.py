"""The side panels as docks the user can close, float, reorder and tab, and their first arrangement.

Every box but the agents and the review (whose tables and diff scroll by themselves) sits in a scroll
area, so a box taller than its dock scrolls instead of drawing its widgets over each other. The docks' object names key their
place in QMainWindow.saveState, so they must not change.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6 import QtCore, QtWidgets

LEFT = QtCore.Qt.DockWidgetArea.LeftDockWidgetArea
RIGHT = QtCore.Qt.DockWidgetArea.RightDockWidgetArea
LEFT_WIDTH = 290
RIGHT_WIDTH = 470  # the agents table's eight columns without a scroll bar


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


# Short titles: tabbed on a small screen, four share a column's width.
DOCKS = (
    DockSpec("knobs", "Scheduler", LEFT),
    DockSpec("launcher", "Swarm", LEFT),
    DockSpec("ab", "A/B run", LEFT),
    DockSpec("engine", "Engine", RIGHT),
    DockSpec("cache", "Prefix cache", RIGHT),
    DockSpec("endpoint", "Endpoint", RIGHT),
    DockSpec("coding", "Coding agents", RIGHT),
    DockSpec("review", "Review", RIGHT, scrolls=False),
    DockSpec("agents", "Agents", RIGHT, scrolls=False),
)
# Stacked one above the other on a roomy screen: lists of docks tabbed together, top to bottom, the first raised.
ROOMY = {LEFT: (("knobs",), ("launcher",), ("ab",)),
         RIGHT: (("engine",), ("agents", "endpoint", "cache", "coding", "review"))}
# On a small one every box is a tab in one column, so the plots get the width of two: the engine (its
# start-up stages, then what it loaded) and the agents raised, the launcher and the knobs a click away
# (the policy switch stays in the header).
SMALL = {RIGHT: (("engine", "launcher", "knobs", "ab"), ("agents", "endpoint", "cache", "coding", "review"))}


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


def size_docks(window: QtWidgets.QMainWindow, docks: dict[str, QtWidgets.QDockWidget], roomy: bool) -> None:
    """The first arrangement's widths and heights, once the window has its size on the screen: the agents
    at least 62% of their column, on a roomy screen the engine's facts whole above them where they fit,
    and on its left the knobs and the launcher their own heights, the A/B run the rest."""
    horizontal, vertical = QtCore.Qt.Orientation.Horizontal, QtCore.Qt.Orientation.Vertical
    window.resizeDocks([docks["agents"]], [RIGHT_WIDTH], horizontal)
    column = window.centralWidget().height()
    if not roomy:
        window.resizeDocks([docks["agents"]], [column * 62 // 100], vertical)
        return
    engine = min(natural_height(docks["engine"]), column * 45 // 100)
    window.resizeDocks([docks["engine"], docks["agents"]], [engine, column - engine], vertical)
    window.resizeDocks([docks["knobs"]], [LEFT_WIDTH], horizontal)
    above = [natural_height(docks["knobs"]), natural_height(docks["launcher"])]
    window.resizeDocks([docks["knobs"], docks["launcher"], docks["ab"]], [*above, column - sum(above)], vertical)


def natural_height(dock: QtWidgets.QDockWidget) -> int:
    """The dock's box at its size hint, with the dock's title bar."""
    return dock.widget().sizeHint().height() + dock.fontMetrics().height() + 12
