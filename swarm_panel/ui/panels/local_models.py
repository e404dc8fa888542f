"""The GGUFs already on disk, for the engine box: the hub cache, llama.cpp's cache, LM Studio's folders and the
`models_dir` setting (app.models_hub.local), each with its size, architecture, quant and trained context.
Picking one names its file; Rescan reads the folders again, no restart needed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6 import QtCore, QtWidgets

from swarm_panel.app.models_hub.local import LocalModel, find

NONE_FOUND = "no GGUF found in the hub cache, llama.cpp's cache, LM Studio's folders or models_dir"


def label(model: LocalModel, fit: str = "") -> str:
    size = f"{model.size / 1e9:.2f} GB" if model.size >= 1e9 else f"{model.size / 1e6:.1f} MB"
    return (f"{model.path.name} · {size} · {model.arch} {model.quant} · "
            f"trained {model.n_ctx_train:,} tokens · {model.source}" + (f" · {fit}" if fit else ""))


class LocalModels(QtWidgets.QWidget):
    """Emits `picked(path)` when the user picks a model found on disk."""

    picked = QtCore.Signal(str)

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.models: list[LocalModel] = []
        # A function of a model's path saying whether it fits with the settings Load starts from (the engine box).
        self.planner: Callable[[], Callable[[str], str] | None] | None = None
        self._models_dir: Path | None = None
        self._scanned = False
        self.combo = QtWidgets.QComboBox()
        self.combo.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.setMinimumContentsLength(16)
        self.combo.activated.connect(self._activated)
        self.rescan = QtWidgets.QPushButton("Rescan")
        self.rescan.setToolTip("Look in the folders again: the hub cache, llama.cpp's cache (LLAMA_CACHE), "
                               "LM Studio's models folder and the models_dir setting")
        self.rescan.clicked.connect(self.refresh)
        row = QtWidgets.QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.combo, 1)
        row.addWidget(self.rescan)

    def set_models_dir(self, folder: Path | None) -> None:
        if folder != self._models_dir or not self._scanned:
            self._models_dir = folder
            self.refresh()

    def refresh(self) -> None:
        self._scanned = True
        self.models = find(self._models_dir)
        self.combo.clear()
        if not self.models:
            self.combo.addItem(NONE_FOUND, None)
            self.combo.setToolTip(NONE_FOUND)
            return
        self.combo.addItem(f"models found on disk: {len(self.models)}", None)
        fit = self.planner() if self.planner is not None else None
        for model in self.models:
            try:
                verdict = fit(str(model.path)) if fit is not None else ""
            except (OSError, ValueError) as exc:
                verdict = f"no plan: {exc}"
            self.combo.addItem(label(model, verdict), str(model.path))
            self.combo.setItemData(self.combo.count() - 1, str(model.path), QtCore.Qt.ItemDataRole.ToolTipRole)
        self.combo.setToolTip("Pick one to load it; the plan below says what it needs in memory")

    def _activated(self, index: int) -> None:
        path = self.combo.itemData(index)
        if path:
            self.picked.emit(path)
