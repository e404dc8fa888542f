"""The tray icon, where the desktop has a tray: its menu switches the policy and pauses new requests, its first line
and mark follow the engine's state, its tooltip gives useful tok/s, the agents connected and the policy. Skipped
without a tray (tests/ui/desktop/test_on_a_desktop.py runs these under a real tray host)."""

from __future__ import annotations

from swarm_panel.app.server.http_server import HttpServer
from tests.ui.desktop.desktop_doubles import a_tray, life_of  # noqa: F401 - a fixture
from tests.ui.test_ui_common import card, no_user_config, window  # noqa: F401 - fixtures


def test_the_tray_menu_switches_the_policy_and_pauses_new_requests(a_tray, window, qtbot):
    window.attach_endpoint(HttpServer(window.service, port=0))  # not listening: its door is what is switched
    life = life_of(window, with_tray=True)
    qtbot.waitUntil(life.tray.icon.isVisible)
    menu = [action.text() for action in life.tray.menu.actions() if action.text()]
    assert menu[:2] == ["Engine: serving", "Show the panel"] and menu[-2:] == ["Pause new requests", "Quit"]
    assert window.current_policy() == "naive" and life.tray.policy_actions["naive"].isChecked()

    life.tray.policy_actions["continuous"].trigger()
    assert window.service.engine_thread.config.policy == "continuous"
    qtbot.waitUntil(lambda: window.controls.policy == "continuous")  # the window's switch follows at its refresh
    assert life.tray.policy_actions["continuous"].isChecked()
    tip = life.tray.icon.toolTip()
    assert "engine serving" in tip and "useful tok/s" in tip and "0 agents connected" in tip
    assert "policy: continuous" in tip

    life.tray.pause_action.trigger()
    assert window.http.paused and life.tray.pause_action.text() == "Resume new requests"
    assert "new requests paused" in life.tray.icon.toolTip()
    life.tray.pause_action.trigger()
    assert not window.http.paused and life.tray.pause_action.text() == "Pause new requests"


def test_the_tray_marks_the_engine_stopped_and_its_policies_go_off(a_tray, window, qtbot):
    life = life_of(window, with_tray=True)
    serving = life.tray.icon.icon().pixmap(32).toImage()
    window.unload_engine()
    life.poll()
    assert life.tray.state_action.text() == "Engine: stopped"
    assert life.tray.icon.icon().pixmap(32).toImage() != serving
    assert not any(action.isEnabled() for action in life.tray.policy_actions.values())
