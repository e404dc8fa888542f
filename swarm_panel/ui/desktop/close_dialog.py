"""The question asked when the window closes with work running: keep serving from the tray, stop everything and quit
(agents ended cleanly, their worktrees kept for Review), or cancel. The answer can be remembered. Without a tray the
window is never hidden, so only quit or cancel is offered; a Quit asked for outright offers the same two.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6 import QtWidgets

from swarm_panel.ui.desktop.running_work import RunningWork

TRAY, QUIT, CANCEL = "tray", "quit", "cancel"
KEEP_TEXT = "Keep serving in the tray"
QUIT_TEXT = "Stop everything and quit"
Ask = Callable[[RunningWork, bool], tuple[str, bool]]  # (work, offer the tray) -> (answer, remember it)


class CloseDialog(QtWidgets.QMessageBox):
    def __init__(self, work: RunningWork, offer_tray: bool, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("closeDialog")
        self.setIcon(QtWidgets.QMessageBox.Icon.Question)
        self.setWindowTitle("swarm-panel is still working")
        self.setText(f"<b>Still running: {work.describe()}.</b>")
        tray_note = ("<b>Keep serving in the tray</b>: the window hides; the endpoint, the engine and the agents go "
                     "on, and the tray icon brings the window back.<br>" if offer_tray else "")
        self.setInformativeText(f"{tray_note}<b>Stop everything and quit</b>: the agents are ended cleanly (their "
                                "worktrees are kept for Review), the engine stops and the port is released.")
        accept = QtWidgets.QMessageBox.ButtonRole.AcceptRole
        self.keep_button = self.addButton(KEEP_TEXT, accept) if offer_tray else None
        self.quit_button = self.addButton(QUIT_TEXT, QtWidgets.QMessageBox.ButtonRole.DestructiveRole)
        self.cancel_button = self.addButton(QtWidgets.QMessageBox.StandardButton.Cancel)
        self.setDefaultButton(self.keep_button or self.cancel_button)
        self.setEscapeButton(self.cancel_button)
        self.remember = QtWidgets.QCheckBox("Remember my answer (the Desktop menu asks again)")
        self.setCheckBox(self.remember)

    def answer(self) -> str:
        clicked = self.clickedButton()
        if clicked is not None and clicked is self.keep_button:
            return TRAY
        return QUIT if clicked is not None and clicked is self.quit_button else CANCEL


def ask_in_dialog(parent: QtWidgets.QWidget) -> Ask:
    def ask(work: RunningWork, offer_tray: bool) -> tuple[str, bool]:
        dialog = CloseDialog(work, offer_tray, parent)
        dialog.exec()
        answer = dialog.answer()
        return answer, answer != CANCEL and dialog.remember.isChecked()

    return ask


def decide(work: RunningWork, remembered: str | None, tray: bool, outright: bool, ask: Ask) -> tuple[str, bool]:
    """What a close does, and whether to remember it. `outright`: a Quit asked for (menu, tray), not the window's
    close button; `tray`: a tray icon is shown, so the window may hide."""
    if not work or remembered == QUIT:
        return QUIT, False
    if remembered == TRAY and tray and not outright:
        return TRAY, False
    return ask(work, tray and not outright)
