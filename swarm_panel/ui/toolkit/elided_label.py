"""A one-line label that never widens its box: text longer than its room ends in "…", whole in the tooltip."""

from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets


class ElidedLabel(QtWidgets.QLabel):
    """A plain-text label whose minimum width is a few characters, so a long message cannot push a
    status bar or a dock wider than the screen; what is cut shows whole as its tooltip."""

    def __init__(self, text: str = "", parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self._tip = ""
        self.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        self.setText(text)

    def text(self) -> str:
        """The whole text, not what fits."""
        return self._full

    def shown_text(self) -> str:
        return super().text()

    def setText(self, text: str) -> None:  # noqa: N802 (Qt API)
        self._full = text
        self._elide()

    def setToolTip(self, tip: str) -> None:  # noqa: N802 (Qt API)
        self._tip = tip
        self._elide()

    def minimumSizeHint(self) -> QtCore.QSize:  # noqa: N802 (Qt API)
        return QtCore.QSize(self.fontMetrics().horizontalAdvance("x" * 8), super().minimumSizeHint().height())

    def sizeHint(self) -> QtCore.QSize:  # noqa: N802 (Qt API)
        margins = self.contentsMargins()
        width = self.fontMetrics().horizontalAdvance(self._full) + margins.left() + margins.right() + 2
        return QtCore.QSize(width, super().sizeHint().height())

    def resizeEvent(self, event: QtGui.QResizeEvent) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        room = self.contentsRect().width()
        shown = self.fontMetrics().elidedText(self._full, QtCore.Qt.TextElideMode.ElideRight, room)
        super().setText(shown)
        cut = shown != self._full
        tip = "\n".join(part for part in (self._full if cut else "", self._tip) if part)
        super().setToolTip(tip)
        self.updateGeometry()
