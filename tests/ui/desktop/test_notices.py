"""Notifications: off per kind, none while the window has the focus; a finished stand-in agent's notification, with
its changed files and +/- lines, goes over the session bus to the notification server, and clicking it opens Review
on that agent. The bus parts skip without a notification server (tests/ui/desktop/test_on_a_desktop.py runs them
with dunst on a private bus)."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from swarm_panel.ui.desktop.notices import Notifier, open_session_bus
from tests.ui.desktop.desktop_doubles import (  # noqa: F401 - a fixture
    a_notification_server,
    life_of,
    on_loop,
    until,
    with_stand_in_agents,
)
from tests.ui.test_ui_common import card, no_user_config, window  # noqa: F401 - fixtures


def test_a_kind_turned_off_or_a_focused_window_sends_nothing(window, qtbot):
    life = life_of(window, with_tray=False)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    assert life.focused()
    assert not life.notifier.notify("engine", "The engine stopped", "…")
    window.hide()
    assert not life.focused()
    life.menu.notify_actions["agent_finished"].setChecked(False)
    assert window.store.get("notify_off") == ["agent_finished"]
    assert not life.notifier.notify("agent_finished", "qwen-code-1 finished", "…")
    with pytest.raises(ValueError, match="unknown notification kind"):
        life.notifier.notify("weather", "Rain", "…")


def test_the_kinds_turned_off_are_remembered(window):
    window.store.set("notify_off", ["download"])
    life = life_of(window, with_tray=False, notifier=Notifier(lambda: False))
    assert life.notifier.off == {"download"} and not life.menu.notify_actions["download"].isChecked()


def watch_the_bus() -> subprocess.Popen:
    if shutil.which("dbus-monitor") is None:
        pytest.skip("dbus-monitor is not installed (Debian: dbus)")
    rule = "interface='org.freedesktop.Notifications',member='Notify'"
    monitor = subprocess.Popen(["dbus-monitor", "--session", rule], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)
    time.sleep(0.5)  # it becomes a monitor before anything is sent
    return monitor


def test_a_finished_agent_is_told_on_the_bus_and_its_click_opens_review_on_it(a_notification_server, window, qapp,
                                                                              qtbot, tmp_path, monkeypatch):
    bus = open_session_bus()
    assert bus is not None
    life = life_of(window, with_tray=False, notifier=Notifier(lambda: life.focused(), None, bus))
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "hello.py").write_text("print('hello')\n")
    with_stand_in_agents(window, tmp_path, monkeypatch, "edit", folder)
    window.set_endpoint("http://127.0.0.1:9")  # the stand-in's "edit" task never calls it
    window.hide()  # in the tray: not looking at the window
    sent = []
    life.notifier.sent.connect(lambda where, title: sent.append((where, title)))
    monitor = watch_the_bus()
    try:
        async def scenario():
            assert window.harness.start()
            await until(lambda: sent, "the notification")

        on_loop(qapp, scenario)
    finally:
        monitor.terminate()
    seen = monitor.communicate(timeout=10)[0]
    run = window.harness.launcher.runs[0]
    assert sent == [("bus", "qwen-code-1 finished")], (run.status, run.exit_code, run.error, run.stderr.text[-500:])
    assert 'string "qwen-code-1 finished"' in seen
    assert 'string "1 file changed, +2 −0: hello.py. Click to review."' in seen

    if shutil.which("dunstctl") is None:
        pytest.skip("the click is made with dunstctl: the server here is not dunst")
    subprocess.run(["dunstctl", "action", "0"], check=True, timeout=10)  # the user clicks it
    qtbot.waitUntil(lambda: window.harness.worktrees.selected() == "qwen-code-1", timeout=20_000)
    assert window.isVisible() and not window.docks["review"].visibleRegion().isEmpty()
    qtbot.waitUntil(lambda: "+print('and more')" in window.harness.worktrees.diff.toPlainText(), timeout=20_000)
    life.close()
