"""Shared pieces of the desktop tests (this module holds no tests): the window's desktop life without a session bus,
stand-in coding agents on the app's loop, and the close question answered by clicking its real buttons."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from PySide6 import QtCore, QtWidgets

from swarm_panel.app.harness.kinds import KINDS
from swarm_panel.ui.desktop.close_dialog import CloseDialog
from swarm_panel.ui.desktop.notices import Notifier
from tests.app.harness.fake_harness import fake_kind

TIMEOUT_S = 60.0


@pytest.fixture
def a_tray(qapp) -> None:
    """Skips where the desktop has no tray: offscreen Qt, or no tray host running."""
    from swarm_panel.ui.desktop import tray

    if not tray.available():
        pytest.skip("this desktop has no system tray (offscreen Qt, or no tray host running)")


def life_of(window, with_tray: bool, notifier: Notifier | None = None):
    from swarm_panel.ui.shell.desktop_life import DesktopLife

    return DesktopLife(window, with_tray=with_tray, notifier=notifier or Notifier(lambda: False))


def with_stand_in_agents(window, tmp_path, monkeypatch, task: str, folder) -> None:
    """The Coding agents tab set to start the stand-in harness, found as Qwen Code's executable, on `folder`."""
    kind = KINDS["qwen-code"]
    monkeypatch.setenv(kind.env_var, fake_kind(tmp_path).executable)
    window.harness.check_installed()
    window.harness.kind.setCurrentIndex(window.harness.kind.findData(kind.key))
    window.harness.folder.setText(str(folder))
    window.harness.task.setText(task)
    window.harness.unconfined.setChecked(True)  # where no fence runs here, launched unfenced


def on_loop(qapp, scenario) -> None:
    import qasync

    qapp.setQuitOnLastWindowClosed(False)  # as the app: a closed window must not end the loop
    loop = qasync.QEventLoop(qapp)
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), TIMEOUT_S))
    finally:
        loop.close()
        asyncio.set_event_loop(None)
        qapp.setQuitOnLastWindowClosed(True)


async def until(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def answer_with(button: str, remember: bool = False) -> list[tuple[str, list[str]]]:
    """Clicks `button` of the next close question shown; the questions seen, as (text, buttons)."""
    seen: list[tuple[str, list[str]]] = []
    deadline = time.monotonic() + 5.0  # a close that asks nothing leaves no click pending for the next one

    def click() -> None:
        dialog = QtWidgets.QApplication.activeModalWidget()
        if not isinstance(dialog, CloseDialog):
            if time.monotonic() < deadline:
                QtCore.QTimer.singleShot(20, click)
            return
        seen.append((dialog.text(), [b.text() for b in dialog.buttons()]))
        dialog.remember.setChecked(remember)
        next(b for b in dialog.buttons() if b.text() == button).click()

    QtCore.QTimer.singleShot(0, click)
    return seen


@pytest.fixture
def a_notification_server() -> None:
    """Skips unless org.freedesktop.Notifications has an owner on the session bus (a daemon such as dunst)."""
    if not os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
        pytest.skip("no session bus (DBUS_SESSION_BUS_ADDRESS is not set)")
    try:
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection

        bus = DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus", interface="org.freedesktop.DBus")
        with open_dbus_connection(bus="SESSION") as connection:
            reply = connection.send_and_get_reply(new_method_call(bus, "NameHasOwner", "s",
                                                                  ("org.freedesktop.Notifications",)), timeout=5)
        owned = bool(reply.body[0])
    except Exception as exc:  # no jeepney, no session bus
        pytest.skip(f"no session bus: {exc}")
    if not owned:
        pytest.skip("no notification server on the session bus (Debian: dunst, in a D-Bus session)")
