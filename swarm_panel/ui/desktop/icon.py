"""The panel's icon, and the tray's copies of it marked with the engine's state: a dot in the lower right corner."""

from __future__ import annotations

from PySide6 import QtCore, QtGui

from swarm_panel.ui.desktop.engine_state import CRASHED, LOADING, SERVING, STOPPED
from swarm_panel.ui.desktop.entry import ICON_FILE
from swarm_panel.ui.toolkit import theme

STATE_COLOURS = {LOADING: theme.USEFUL, SERVING: theme.MINT, STOPPED: theme.PADDING, CRASHED: theme.QUEUE}


def app_icon() -> QtGui.QIcon:
    return QtGui.QIcon(str(ICON_FILE))


def marked(state: str) -> QtGui.QIcon:
    image = QtGui.QImage(str(ICON_FILE))
    if image.isNull():
        return QtGui.QIcon()
    size = image.width()
    painter = QtGui.QPainter(image)
    painter.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing)
    painter.setPen(QtGui.QPen(QtGui.QColor(theme.BACKGROUND), size * 0.04))
    painter.setBrush(QtGui.QColor(STATE_COLOURS.get(state, theme.PADDING)))
    dot = size * 0.42  # big enough to tell apart at a tray's 22 pixels
    painter.drawEllipse(QtCore.QRectF(size - dot - size * 0.02, size - dot - size * 0.02, dot, dot))
    painter.end()
    return QtGui.QIcon(QtGui.QPixmap.fromImage(image))
