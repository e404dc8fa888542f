"""Where a window may open: within a screen's available geometry, with a key to remember a layout per screen."""

from __future__ import annotations

from PySide6 import QtCore, QtGui

# Below either, the first launch tabs its secondary boxes (a 1,366 x 768 laptop, a 1080p screen at 150%).
ROOMY_WIDTH = 1800
ROOMY_HEIGHT = 1000


def screen_key(screen: QtGui.QScreen) -> str:
    """The settings group a layout is remembered under: the screen's name and its available size."""
    size = screen.availableGeometry().size()
    name = "".join(c if c.isalnum() else "_" for c in screen.name()) or "screen"
    return f"{name}_{size.width()}x{size.height()}"


def roomy(available: QtCore.QRect) -> bool:
    return available.width() >= ROOMY_WIDTH and available.height() >= ROOMY_HEIGHT


def fit_rect(frame: QtCore.QRect, margins: QtCore.QMargins, available: QtCore.QRect) -> QtCore.QRect:
    """The window geometry (inside its frame) whose frame lies within `available`: shrunk first, then moved.

    frame: the window's frame geometry wanted; margins: the frame's decoration around the window."""
    width = min(frame.width(), available.width())
    height = min(frame.height(), available.height())
    left = min(max(frame.left(), available.left()), available.right() + 1 - width)
    top = min(max(frame.top(), available.top()), available.bottom() + 1 - height)
    return QtCore.QRect(left + margins.left(), top + margins.top(), width - margins.left() - margins.right(),
                        height - margins.top() - margins.bottom())
