"""What the panel's supervising process shows after the panel died in native code: what happened, and a restart."""

from __future__ import annotations

from PySide6 import QtWidgets

from swarm_panel.app.supervisor.supervise import Crash


def crash_box(crash: Crash) -> QtWidgets.QMessageBox:
    box = QtWidgets.QMessageBox(QtWidgets.QMessageBox.Icon.Critical, "swarm-panel: the engine crashed",
                                f"The engine crashed ({crash.signal_name}), and the panel with it. Agents lost "
                                "their server; their worktrees are kept.")
    box.setInformativeText("Restart the panel? The details name the step it died in; docs/gpu.md lists the crashes "
                           "known on GPU drivers.")
    box.setDetailedText(crash.message())
    box.addButton("Restart", QtWidgets.QMessageBox.ButtonRole.AcceptRole)
    box.addButton("Quit", QtWidgets.QMessageBox.ButtonRole.RejectRole)
    return box


def offer_restart(crash: Crash) -> bool:
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    box = crash_box(crash)
    box.exec()
    restart = box.buttonRole(box.clickedButton()) == QtWidgets.QMessageBox.ButtonRole.AcceptRole
    del app
    return restart
