"""The endpoint: its URL with a copy button and an optional API key (its agents are the agents box's)."""

from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

from swarm_panel.ui.toolkit import theme


class EndpointPanel(QtWidgets.QGroupBox):
    api_key_changed = QtCore.Signal(str)

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("Endpoint (OpenAI-compatible)", parent)
        self.url = QtWidgets.QLineEdit("not listening")
        self.url.setReadOnly(True)
        self.copy = QtWidgets.QPushButton("Copy")
        self.copy.setToolTip("Copy the base URL agents should use")
        self.copy.clicked.connect(self._copy)
        self.api_key = QtWidgets.QLineEdit()
        self.api_key.setPlaceholderText("none: any local client may connect")
        self.api_key.setEchoMode(QtWidgets.QLineEdit.EchoMode.PasswordEchoOnEdit)
        self.api_key.editingFinished.connect(lambda: self.api_key_changed.emit(self.api_key.text().strip()))
        self.note = QtWidgets.QLabel("")
        self.note.setWordWrap(True)
        self.note.setStyleSheet(f"color: {theme.TEXT_DIM}")

        url_row = QtWidgets.QHBoxLayout()
        url_row.addWidget(self.url, 1)
        url_row.addWidget(self.copy)
        form = QtWidgets.QFormLayout()
        form.addRow("base URL", url_row)
        form.addRow("API key", self.api_key)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.note)
        layout.addStretch(1)

    def _copy(self) -> None:
        QtGui.QGuiApplication.clipboard().setText(self.url.text())
        self.copy.setText("Copied")
        QtCore.QTimer.singleShot(1200, lambda: self.copy.setText("Copy"))

    def set_url(self, url: str | None, note: str = "") -> None:
        self.url.setText(f"{url}/v1" if url else "not listening")
        self.note.setText(note)
