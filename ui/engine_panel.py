"""Engine and model: which engine, the model's facts, load/unload with progress and clear errors."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from PySide6 import QtCore, QtWidgets

from ui import theme

CHOICES = (("modeled", "Modeled card (RX 9070 XT cost model)"), ("demo", "llama.cpp: demo model (random weights)"),
           ("gguf", "llama.cpp: a GGUF file…"))
LAYOUTS = (
    (True, "Unified KV: lanes share one pool and their prompt prefixes"),
    (False, "Split KV: each lane its own n_ctx / lanes, as llama-server"),
)
LAYOUT_TIP = ("Unified: any lane may use the whole context, the batch can widen live, and agents share a system "
              "prompt's KV. Split: each lane gets a fixed share and attends over its own cells only, which is "
              "faster for small models on a CPU; a lane keeps its agent's conversation for the next turn.")
FACT_LABELS = {
    "engine": "engine", "name": "model", "n_params": "parameters", "quantization": "quantization",
    "file_type": "quantization", "n_ctx": "context", "kv_type": "KV type", "device": "device",
    "kv_capacity_tokens": "KV capacity (tokens)", "step_line": "cost model", "architecture": "architecture",
    "file_size_bytes": "file size", "max_lanes": "lanes", "n_gpu_layers": "GPU layers", "path": "file",
    "kv_unified": "unified KV",
}


def _format(key: str, value: Any) -> str:
    if key == "n_params" and isinstance(value, (int, float)):
        return f"{value / 1e9:.2f} B" if value >= 1e9 else f"{value / 1e6:.1f} M"
    if key == "file_size_bytes" and isinstance(value, int):
        return f"{value / 2**20:,.1f} MiB"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def engine_changes(choice: str, model_path: str, kv_unified: bool = True) -> dict[str, Any]:
    """The SwarmService.reload changes one engine choice asks for."""
    if choice == "modeled":
        return {"engine": "modeled"}
    if choice == "demo":
        return {"engine": "llama", "model": None, "kv_unified": kv_unified}
    return {"engine": "llama", "model": Path(model_path).expanduser() if model_path else None,
            "kv_unified": kv_unified}


class EnginePanel(QtWidgets.QGroupBox):
    """Emits `load_requested(changes)`; the window runs the load and calls `load_finished`."""

    load_requested = QtCore.Signal(dict)
    unload_requested = QtCore.Signal()

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("Engine and model", parent)
        self.choice = QtWidgets.QComboBox()
        for key, label in CHOICES:
            self.choice.addItem(label, key)
        self.path = QtWidgets.QLineEdit()
        self.path.setPlaceholderText("path to a .gguf file")
        self.browse = QtWidgets.QPushButton("Browse…")
        self.browse.clicked.connect(self._browse)
        self.layout_choice = QtWidgets.QComboBox()
        for unified, label in LAYOUTS:
            self.layout_choice.addItem(label, unified)
        self.layout_choice.setToolTip(LAYOUT_TIP)
        self.load = QtWidgets.QPushButton("Load")
        self.load.setObjectName("primary")
        self.unload = QtWidgets.QPushButton("Unload")
        self.load.clicked.connect(self._load)
        self.unload.clicked.connect(self.unload_requested.emit)
        self.progress = QtWidgets.QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setTextVisible(False)
        self.progress.setMaximumHeight(6)
        self.status = QtWidgets.QLabel("")
        self.status.setWordWrap(True)
        self.warning = QtWidgets.QLabel("")
        self.warning.setObjectName("warning")
        self.warning.setWordWrap(True)
        self.facts = QtWidgets.QFormLayout()
        self.facts.setVerticalSpacing(2)
        self.choice.currentIndexChanged.connect(self._choice_changed)

        path_row = QtWidgets.QHBoxLayout()
        path_row.addWidget(self.path, 1)
        path_row.addWidget(self.browse)
        buttons = QtWidgets.QHBoxLayout()
        buttons.addWidget(self.load)
        buttons.addWidget(self.unload)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(self.choice)
        layout.addLayout(path_row)
        layout.addWidget(self.layout_choice)
        layout.addLayout(buttons)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addLayout(self.facts)
        layout.addWidget(self.warning)
        self._choice_changed()

    def _choice_changed(self) -> None:
        gguf = self.choice.currentData() == "gguf"
        self.path.setVisible(gguf)
        self.browse.setVisible(gguf)
        self.layout_choice.setVisible(self.choice.currentData() != "modeled")

    def _browse(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Choose a GGUF model", self.path.text(),
                                                        "GGUF models (*.gguf);;All files (*)")
        if path:
            self.path.setText(path)

    def _load(self) -> None:
        choice = self.choice.currentData()
        if choice == "gguf" and not self.path.text().strip():
            self.set_error("Choose a GGUF file first.")
            return
        self.load_requested.emit(engine_changes(choice, self.path.text().strip(), self.kv_unified))

    @property
    def kv_unified(self) -> bool:
        return bool(self.layout_choice.currentData())

    def select(self, engine: str, model: str | None, kv_unified: bool = True) -> None:
        key = "modeled" if engine == "modeled" else ("gguf" if model else "demo")
        self.choice.setCurrentIndex([k for k, _ in CHOICES].index(key))
        self.layout_choice.setCurrentIndex([u for u, _ in LAYOUTS].index(kv_unified))
        if model:
            self.path.setText(str(model))

    def set_busy(self, text: str) -> None:
        self.progress.setRange(0, 0)  # busy
        self.load.setEnabled(False)
        self.unload.setEnabled(False)
        self.status.setText(text)
        self.status.setObjectName("")
        self.status.setStyleSheet(f"color: {theme.TEXT_DIM}")

    def set_error(self, message: str) -> None:
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.load.setEnabled(True)
        self.unload.setEnabled(True)
        self.status.setText(f"Could not load: {message}")
        self.status.setStyleSheet("color: #ff8a80")

    def show_facts(self, facts: dict[str, Any] | None) -> None:
        self.progress.setRange(0, 1)
        loaded = bool(facts) and not ("engine" in facts and facts["engine"] is None)
        self.progress.setValue(1 if loaded else 0)
        self.load.setEnabled(True)
        self.unload.setEnabled(True)
        while self.facts.rowCount():
            self.facts.removeRow(0)
        if not loaded:
            self.status.setText("No engine loaded." + (f" {facts['error']}" if facts and facts.get("error") else ""))
            self.warning.setText("")
            return
        self.status.setText("Loaded.")
        self.status.setStyleSheet(f"color: {theme.MINT}")
        facts = {"engine": "llama.cpp", **facts} if "engine" not in facts else facts
        for key, title in FACT_LABELS.items():
            value = facts.get(key)
            if value is None or (key == "quantization" and "file_type" in facts):
                continue
            label = QtWidgets.QLabel(_format(key, value))
            label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
            label.setWordWrap(True)
            self.facts.addRow(title, label)
        self.setToolTip("\n".join(f"{k}: {v}" for k, v in facts.items()))
        notes = [facts["note"]] if facts.get("note") else []
        if "random" in str(facts.get("name", "")).lower() or facts.get("demo"):
            notes.append("The demo model has random weights: its text is noise. It is here to exercise the real "
                         "llama.cpp batching path; pick a GGUF for meaningful output.")
        self.warning.setText("\n".join(notes))


class Loader(QtCore.QObject):
    """Runs a blocking load on a worker thread and reports back on the GUI thread."""

    done = QtCore.Signal(object)  # None on success, else the error message

    def run(self, work) -> threading.Thread:
        def target() -> None:
            try:
                work()
            except Exception as exc:  # a bad file is a message, never a crash
                self.done.emit(str(exc) or type(exc).__name__)
            else:
                self.done.emit(None)

        thread = threading.Thread(target=target, name="swarm-panel-load", daemon=True)
        thread.start()
        return thread
