"""The tray icon, where the desktop has a tray: its mark and first menu line say the engine's state, its tooltip the
useful tok/s, the agents connected and the policy; its menu shows the window, switches the policy, pauses new
requests and quits. Clicking the icon shows the window.
"""

from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

from swarm_panel.ui.desktop.engine_state import STOPPED
from swarm_panel.ui.desktop.icon import marked

PAUSE_TEXT, RESUME_TEXT = "Pause new requests", "Resume new requests"


def available() -> bool:
    return QtWidgets.QSystemTrayIcon.isSystemTrayAvailable()


class PanelTray(QtCore.QObject):
    show_requested = QtCore.Signal()
    policy_chosen = QtCore.Signal(str)
    pause_toggled = QtCore.Signal(bool)  # True: hold new requests
    quit_requested = QtCore.Signal()

    def __init__(self, policies: dict[str, str], parent: QtCore.QObject | None = None) -> None:
        """policies: each policy's name and label, in the order the panel's switch shows them."""
        super().__init__(parent)
        self.icon = QtWidgets.QSystemTrayIcon(marked(STOPPED), self)
        self.menu = QtWidgets.QMenu()
        self.state_action = self.menu.addAction("Engine: stopped")
        self.state_action.setEnabled(False)
        self.menu.addAction("Show the panel", self.show_requested.emit)
        self.menu.addSection("Batching policy")
        self.policy_group = QtGui.QActionGroup(self.menu)
        self.policy_actions: dict[str, QtGui.QAction] = {}
        for name, label in policies.items():
            action = self.menu.addAction(label)
            action.setCheckable(True)
            action.setData(name)
            self.policy_group.addAction(action)
            self.policy_actions[name] = action
        self.policy_group.triggered.connect(lambda action: self.policy_chosen.emit(action.data()))
        self.menu.addSeparator()
        self.pause_action = self.menu.addAction(PAUSE_TEXT)
        self.pause_action.setCheckable(True)
        self.pause_action.toggled.connect(self._pause_toggled)
        self.menu.addSeparator()
        self.menu.addAction("Quit", self.quit_requested.emit)
        self.icon.setContextMenu(self.menu)
        self.icon.activated.connect(self._activated)
        self.state = STOPPED

    def _activated(self, reason: QtWidgets.QSystemTrayIcon.ActivationReason) -> None:
        if reason in (QtWidgets.QSystemTrayIcon.ActivationReason.Trigger,
                      QtWidgets.QSystemTrayIcon.ActivationReason.DoubleClick):
            self.show_requested.emit()

    def _pause_toggled(self, paused: bool) -> None:
        self.pause_action.setText(RESUME_TEXT if paused else PAUSE_TEXT)
        self.pause_toggled.emit(paused)

    def show(self) -> None:
        self.icon.show()

    def hide(self) -> None:
        self.icon.hide()

    def show_state(self, state: str, detail: str) -> None:
        if state != self.state:
            self.state = state
            self.icon.setIcon(marked(state))
        self.state_action.setText(f"Engine: {state}")
        self.state_action.setToolTip(detail)

    def show_figures(self, tok_s: float | None, agents: int, policy: str, paused: bool) -> None:
        """The tooltip, and the policy's check mark; no policy (no engine, or a fleet): the switch is off."""
        for name, action in self.policy_actions.items():
            action.setEnabled(bool(policy) and policy in self.policy_actions)
            if name == policy and not action.isChecked():
                action.setChecked(True)
        label = self.policy_actions[policy].text() if policy in self.policy_actions else policy or "none"
        rate = "–" if tok_s is None else f"{tok_s:.0f}"
        lines = [f"swarm-panel: engine {self.state}", f"{rate} useful tok/s · {agents} agent"
                 f"{'s' if agents != 1 else ''} connected", f"policy: {label}"]
        if paused:
            lines.append("new requests paused")
        self.icon.setToolTip("\n".join(lines))
        with QtCore.QSignalBlocker(self.pause_action):
            self.pause_action.setChecked(paused)
            self.pause_action.setText(RESUME_TEXT if paused else PAUSE_TEXT)
