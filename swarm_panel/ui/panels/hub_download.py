"""A model from the hub in the engine box: a repository's GGUFs listed with their sizes (the engine box's plan
line says what each needs before its download), then a download with a bar, its speed and time left, and
Cancel, which leaves the partial blob for the next download to resume (app.models_hub.fetch)."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable

from huggingface_hub.utils import tqdm as hub_tqdm
from PySide6 import QtCore, QtWidgets

from swarm_panel.app.models_hub.fetch import fetch
from swarm_panel.app.models_hub.listing import repo_models


class DownloadCancelled(Exception):
    """Raised inside the download when the user pressed Cancel; the partial blob stays for a resume."""


def progress_class(report: Callable[[int, int, float | None], None], cancelled: threading.Event) -> type:
    """A tqdm class for huggingface_hub that reports (done, total, bytes a second) and stops at Cancel."""

    class Progress(hub_tqdm):
        def __init__(self, *args, **kwargs) -> None:
            # Counted even where HF progress bars are turned off; drawn nowhere.
            kwargs.update(disable=False, file=io.StringIO())
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            if cancelled.is_set():
                raise DownloadCancelled("the download was cancelled; the next one resumes it")
            shown = super().update(n)
            info = self.format_dict
            report(int(info["n"]), int(info["total"] or 0), info.get("rate"))
            return shown

    return Progress


def describe_progress(done: int, total: int, rate: float | None) -> str:
    text = f"{done / 1e6:,.1f} of {total / 1e6:,.1f} MB" if total else f"{done / 1e6:,.1f} MB"
    if rate:
        text += f" · {rate / 1e6:,.1f} MB/s"
        if total:
            text += f" · {max(0.0, (total - done) / rate):,.0f} s left"
    return text


class HubDownload(QtWidgets.QWidget):
    """Emits `chosen(hf_name)` when a model of the repository is picked (for the plan) and `downloaded(path)`."""

    chosen = QtCore.Signal(str)
    downloaded = QtCore.Signal(str)
    failed = QtCore.Signal(str, str)  # the model, why (not for a Cancel)
    # From worker threads to the GUI thread.
    _listed = QtCore.Signal(object)  # dict of name -> bytes, or an error message
    _progressed = QtCore.Signal(int, int, object)
    _finished = QtCore.Signal(object, object)  # path or None, error message or None

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        # Called on the GUI thread at each look-up: a function of an hf name saying whether it fits ("fits: 5.9
        # GiB for 8 x 32,768"), from its remote header, which the look-up's thread calls; set by the engine box.
        self.planner: Callable[[], Callable[[str], str] | None] | None = None
        self.repo = QtWidgets.QLineEdit()
        self.repo.setPlaceholderText("from the hub: ORG/REPO, e.g. unsloth/Qwen3.5-9B-GGUF")
        self.look_up = QtWidgets.QPushButton("Look up")
        self.models = QtWidgets.QComboBox()
        self.models.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.models.setMinimumContentsLength(16)
        self.download = QtWidgets.QPushButton("Download")
        self.cancel = QtWidgets.QPushButton("Cancel")
        self.bar = QtWidgets.QProgressBar()
        self.bar.setMaximumHeight(8)
        self.bar.setTextVisible(False)
        self.status = QtWidgets.QLabel("")
        self.status.setWordWrap(True)
        self._cancelled = threading.Event()
        self.downloading = ""  # the model being downloaded
        self.look_up.clicked.connect(self._look_up)
        self.repo.returnPressed.connect(self._look_up)
        self.models.activated.connect(self._picked)
        self.download.clicked.connect(self._download)
        self.cancel.clicked.connect(self._cancelled.set)
        self._listed.connect(self._show_models)
        self._progressed.connect(self._show_progress)
        self._finished.connect(self._done)
        top = QtWidgets.QHBoxLayout()
        top.addWidget(self.repo, 1)
        top.addWidget(self.look_up)
        middle = QtWidgets.QHBoxLayout()
        middle.addWidget(self.models, 1)
        middle.addWidget(self.download)
        middle.addWidget(self.cancel)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addLayout(middle)
        layout.addWidget(self.bar)
        layout.addWidget(self.status)
        self._idle()

    def hub_name(self) -> str | None:
        name = self.models.currentData()
        return f"hf:{self.repo.text().strip()}:{name}" if name else None

    def _idle(self) -> None:
        self.models.setEnabled(self.models.count() > 0)
        self.download.setEnabled(self.models.currentData() is not None)
        self.cancel.setEnabled(False)
        self.look_up.setEnabled(True)

    def _look_up(self) -> None:
        repo = self.repo.text().strip()
        if not repo:
            return
        self.look_up.setEnabled(False)
        self.status.setText(f"asking the hub what {repo} holds…")
        fit = self.planner() if self.planner is not None else None
        threading.Thread(target=self._list, args=(repo, fit), name="swarm-panel-hub", daemon=True).start()

    def _list(self, repo: str, fit: Callable[[str], str] | None) -> None:
        try:
            models = repo_models(repo)
        except Exception as exc:  # a bad name or no network is a message in the box
            self._listed.emit(str(exc) or type(exc).__name__)
            return
        fits = {}
        for name in models:
            try:
                fits[name] = fit(f"hf:{repo}:{name}") if fit is not None else ""
            except Exception as exc:  # one header that cannot be read leaves the others listed
                fits[name] = f"no plan: {exc}"
        self._listed.emit({name: (size, fits[name]) for name, size in models.items()})

    def _show_models(self, result: object) -> None:
        self.models.clear()
        if isinstance(result, str):
            self.status.setText(result)
        else:
            for name, (size, fit) in result.items():
                self.models.addItem(f"{name} · {size / 1e9:.2f} GB" + (f" · {fit}" if fit else ""), name)
            self.status.setText(f"{len(result)} models; pick one for what it needs in memory before its download")
            self._picked()
        self._idle()

    def _picked(self, *_: object) -> None:
        name = self.hub_name()
        if name:
            self.chosen.emit(name)

    def _download(self) -> None:
        name = self.hub_name()
        if name is None:
            return
        self._cancelled.clear()
        self.download.setEnabled(False)
        self.look_up.setEnabled(False)
        self.cancel.setEnabled(True)
        self.bar.setRange(0, 0)
        self.downloading = name
        self.status.setText(f"downloading {name}…")
        progress = progress_class(lambda done, total, rate: self._progressed.emit(done, total, rate), self._cancelled)
        threading.Thread(target=self._fetch, args=(name, progress), name="swarm-panel-download", daemon=True).start()

    def _fetch(self, name: str, progress: type) -> None:
        try:
            path = fetch(name, say=lambda text: None, tqdm_class=progress)
        except Exception as exc:  # cancelled, no space, a bad checksum: a message in the box
            self._finished.emit(None, str(exc) or type(exc).__name__)
        else:
            self._finished.emit(str(path), None)

    def _show_progress(self, done: int, total: int, rate: object) -> None:
        if total:
            self.bar.setRange(0, 1000)
            self.bar.setValue(round(1000 * done / total))
        self.status.setText(describe_progress(done, total, rate if isinstance(rate, float) else None))

    def _done(self, path: object, error: object) -> None:
        self.bar.setRange(0, 1)
        self.bar.setValue(1 if path else 0)
        self._idle()
        name, self.downloading = self.downloading, ""
        if error:
            self.status.setText(str(error))
            if not self._cancelled.is_set():
                self.failed.emit(name, str(error))
            return
        self.status.setText(f"downloaded: {path}")
        self.downloaded.emit(str(path))
