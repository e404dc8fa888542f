"""The engine box's editor for the fleet: one backend a line, as `swarm-panel gateway --backend` takes them."""

from __future__ import annotations

from PySide6 import QtGui, QtWidgets

from swarm_panel.app.settings.backends import BackendConfig, format_backend, parse_backend_lines

PLACEHOLDER = "http://127.0.0.1:8001\nvllm=http://gpu-box:8000 slots=64 weight=4\nllama-server=http://127.0.0.1:8081"
TIP = ("One backend a line: [KIND=]URL, then optionally key=API_KEY weight=W slots=N name=LABEL.\n"
       "KIND is vllm, llama-server or swarm-panel; without it the kind is told from the backend's /metrics.\n"
       "weight is the backend's share of new agents; slots, its concurrent sequences (vLLM does not report them).\n"
       "Lines starting with # are skipped. The list (keys included) is remembered in the panel's settings.")
VISIBLE_LINES = 4


class BackendsEditor(QtWidgets.QPlainTextEdit):
    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setPlaceholderText(PLACEHOLDER)
        self.setToolTip(TIP)
        self.setLineWrapMode(QtWidgets.QPlainTextEdit.LineWrapMode.NoWrap)
        self.setFont(QtGui.QFontDatabase.systemFont(QtGui.QFontDatabase.SystemFont.FixedFont))
        # The engine box has a fixed height in a narrow column: a few lines, scrolled beyond that.
        lines = self.fontMetrics().lineSpacing() * VISIBLE_LINES
        self.setFixedHeight(lines + 2 * int(self.document().documentMargin()) + 2 * self.frameWidth())

    def backends(self) -> list[BackendConfig]:
        """Raises ValueError naming the line at fault."""
        return parse_backend_lines(self.toPlainText())

    def set_backends(self, backends: list[BackendConfig]) -> None:
        self.setPlainText("\n".join(format_backend(b) for b in backends))
