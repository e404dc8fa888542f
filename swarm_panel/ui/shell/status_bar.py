"""Status bar: the fitted step line t(B) = a + b*B, the ceiling it implies, step rate, address, and once per
folder that the program cannot write in (runtime.core.careful_write), what it therefore keeps only in memory."""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from swarm_panel.runtime.core.careful_write import on_unwritable, unwritable_folders
from swarm_panel.runtime.core.engine import EngineFigures
from swarm_panel.runtime.core.fit import StepLine
from swarm_panel.runtime.llama.facts import LlamaFigures
from swarm_panel.ui.toolkit.elided_label import ElidedLabel


class StatusBar(QtWidgets.QStatusBar):
    # careful_write calls its listeners on the writing thread (the engine's, the prefix writer's): a signal
    # carries the news to the GUI thread.
    unwritable_found = QtCore.Signal(str, str)

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        # Elided: a long figure must not make the window wider than a small screen; the tooltip shows it whole.
        self.step_line = ElidedLabel("t(B): waiting for decode steps at two widths")
        self.ceiling = ElidedLabel("ceiling: –")
        self.rate = ElidedLabel("0 steps/s")
        self.address = QtWidgets.QLabel("not listening")
        self.unwritable = ElidedLabel()
        self.unwritable.setObjectName("unwritable")
        self.unwritable.hide()
        self._unwritable_shown: dict[str, str] = {}
        for label, stretch in ((self.step_line, 3), (self.ceiling, 2), (self.rate, 2)):
            self.addWidget(label, stretch)
        self.addPermanentWidget(self.unwritable)
        self.addPermanentWidget(self.address)
        self.unwritable_found.connect(self.show_unwritable, QtCore.Qt.ConnectionType.QueuedConnection)
        stop = on_unwritable(self._unwritable_elsewhere)
        self.destroyed.connect(lambda *_: stop())
        for folder, message in unwritable_folders().items():
            self.show_unwritable(str(folder), message)

    def _unwritable_elsewhere(self, folder, message: str) -> None:
        try:
            self.unwritable_found.emit(str(folder), message)
        except RuntimeError:  # the bar is gone (its window closed) while a write failed
            pass

    def show_unwritable(self, folder: str, message: str) -> None:
        """Says once per folder that it cannot be written: the newest in the bar, all of them in its tooltip."""
        if folder in self._unwritable_shown:
            return
        self._unwritable_shown[folder] = message
        count = len(self._unwritable_shown)
        more = f" (and {count - 1} more folders)" if count > 1 else ""
        self.unwritable.setText(f"⚠ {message}; kept in memory{more}")
        self.unwritable.setToolTip("\n".join(self._unwritable_shown.values()))
        self.unwritable.show()

    def show_figures(self, line: StepLine | None, num_lanes: int, step_rate: float, mean_step_ms: float,
                     model_line: StepLine | None = None, measured_ms: float | None = None,
                     threads_note: str = "") -> None:
        """model_line: the engine's own cost model, shown until decode steps at two widths allow a fit;
        measured_ms: the median decode step at num_lanes itself, which the ceiling prefers;
        threads_note: why llama.cpp runs on fewer threads than it was given, if it does."""
        if line is not None:
            self.step_line.setText(f"fitted step line {line} ({line.points} steps)")
        elif model_line is not None:
            self.step_line.setText(f"cost model {model_line} (fit needs decode steps at two widths)")
        if measured_ms:
            self.ceiling.setText(f"ceiling at B={num_lanes}: {num_lanes / measured_ms * 1e3:.0f} tok/s "
                                 f"(t({num_lanes}) = {measured_ms:.1f} ms measured)")
        elif line or model_line:
            self.ceiling.setText(f"ceiling at B={num_lanes}: {(line or model_line).ceiling_tok_s(num_lanes):.0f} tok/s")
        rate = f"engine: {step_rate:.1f} steps/s, {mean_step_ms:.1f} ms/step"
        self.rate.setText(f"{rate}; {threads_note}" if threads_note else rate)

    def show_address(self, url: str | None) -> None:
        self.address.setText(url or "not listening")


def threads_note(figures: EngineFigures | None) -> str:
    """What a user should know when fewer threads run than the engine was given, else ''."""
    if not isinstance(figures, LlamaFigures):
        return ""
    threads, most = figures.n_threads, figures.threads_most
    if not threads or not most or threads >= most:
        return ""
    others = figures.other_processes_cpu_cores or 0.0
    return f"llama.cpp on {threads} of {most} threads: other processes use {others:.1f} cores"
