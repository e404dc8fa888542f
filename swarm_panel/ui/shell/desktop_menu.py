"""The Desktop menu: which notifications are shown, what a close does while work runs, and start at login. Each
choice is remembered in the panel's settings as it is made."""

from __future__ import annotations

from PySide6 import QtCore, QtGui

from swarm_panel.ui.desktop import entry
from swarm_panel.ui.desktop.close_dialog import QUIT, TRAY
from swarm_panel.ui.desktop.notices import KINDS, Notifier
from swarm_panel.ui.shell.main_window import MainWindow

ON_CLOSE = {None: "Ask", TRAY: "Keep serving in the tray", QUIT: "Stop everything and quit"}


class DesktopMenu(QtCore.QObject):
    def __init__(self, window: MainWindow, notifier: Notifier, tray: bool) -> None:
        """tray: a tray icon is shown, so a close may keep serving from it."""
        super().__init__(window)
        self.window = window
        self.store = window.store
        self.notifier = notifier
        notifier.off = set(self._remembered("notify_off", []))
        menu = window.menuBar().addMenu("&Desktop")
        menu.addSection("Notify when")
        self.notify_actions: dict[str, QtGui.QAction] = {}
        for kind, text in KINDS.items():
            action = menu.addAction(text)
            action.setCheckable(True)
            action.setChecked(kind not in notifier.off)
            action.toggled.connect(lambda on, kind=kind: self.set_notify(kind, on))
            self.notify_actions[kind] = action
        menu.addSection("When closing with work running")
        group = QtGui.QActionGroup(menu)
        self.on_close_actions: dict[str | None, QtGui.QAction] = {}
        for answer, text in ON_CLOSE.items():
            action = menu.addAction(text)
            action.setCheckable(True)
            action.setEnabled(answer != TRAY or tray)
            group.addAction(action)
            action.triggered.connect(lambda _=False, answer=answer: self._remember("on_close", answer))
            self.on_close_actions[answer] = action
        self.show_on_close()
        menu.addSeparator()
        self.autostart_action = menu.addAction("Start at login")
        self.autostart_action.setCheckable(True)
        self.autostart_action.setChecked(entry.autostart_installed())
        self.autostart_action.toggled.connect(self.set_autostart)

    def _remembered(self, key: str, default):
        return self.store.get(key, default) if self.store is not None else default

    def _remember(self, key: str, value) -> None:
        if self.store is not None:
            self.store.set(key, value)

    @property
    def on_close(self) -> str | None:
        """The answer remembered for a close while work runs; None: ask."""
        return self._remembered("on_close", None)

    def remember_close(self, answer: str) -> None:
        self._remember("on_close", answer)
        self.show_on_close()

    def show_on_close(self) -> None:
        self.on_close_actions.get(self.on_close, self.on_close_actions[None]).setChecked(True)

    def set_notify(self, kind: str, on: bool) -> None:
        if on:
            self.notifier.off.discard(kind)
        else:
            self.notifier.off.add(kind)
        self._remember("notify_off", sorted(self.notifier.off))

    def set_autostart(self, on: bool) -> None:
        try:
            where = entry.set_autostart(on)
        except OSError as exc:
            self.window.statusBar().showMessage(f"Start at login not changed: {exc}", 8000)
            return
        self.window.statusBar().showMessage(f"{'Wrote' if on else 'Removed'} {where}", 8000)
