"""After the panel died in native code its supervisor says so and offers a restart (ui.shell.crash_dialog)."""

from __future__ import annotations

import signal

from PySide6 import QtWidgets

from swarm_panel.app.supervisor.supervise import Crash
from swarm_panel.ui.shell.crash_dialog import crash_box


def test_the_crash_box_names_the_signal_and_the_step_and_offers_a_restart(qtbot):
    box = crash_box(Crash(signal.SIGSEGV, "llama_decode: 49 tokens, 5 sequences, 5 outputs"))
    qtbot.addWidget(box)
    assert "SIGSEGV" in box.text() and "worktrees are kept" in box.text()
    assert "49 tokens, 5 sequences" in box.detailedText()
    roles = {b.text(): box.buttonRole(b) for b in box.buttons()}
    assert roles["Restart"] == QtWidgets.QMessageBox.ButtonRole.AcceptRole
    assert roles["Quit"] == QtWidgets.QMessageBox.ButtonRole.RejectRole
