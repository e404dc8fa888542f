"""Closing while work runs asks first, naming it; each answer does what it says: cancel keeps everything, quit stops
the agents cleanly (their worktrees kept) and the engine, keep-in-the-tray hides the window and serves on. With
nothing running, closing quits as before; a remembered answer is not asked again; without a tray, the window is never
hidden. The tray's answer needs a tray: skipped without one (tests/ui/desktop/test_on_a_desktop.py provides one)."""

from __future__ import annotations

from swarm_panel.app.workspace.records import all_workspaces
from swarm_panel.ui.desktop.close_dialog import KEEP_TEXT, QUIT, QUIT_TEXT, TRAY
from tests.ui.desktop.desktop_doubles import a_tray, answer_with, life_of, on_loop, until, with_stand_in_agents  # noqa: F401
from tests.ui.test_ui_common import card, no_user_config, window  # noqa: F401 - fixtures


def start_swarm(window, agents: int = 3) -> None:
    window.launcher.agents.setValue(agents)
    window.launcher.mode.setCurrentIndex(window.launcher.mode.findData("fixed")
                                         if window.launcher.mode.findData("fixed") >= 0 else 0)
    assert window.launcher.start() == "local"  # no endpoint: in-process agents on the engine thread


def never_asked(work, offer_tray):
    raise AssertionError(f"asked about {work.describe()}")


def test_with_nothing_running_closing_quits_without_a_question(window):
    life_of(window, with_tray=False).ask = never_asked
    window.close()
    assert window.shut and not window.service.loaded


def test_cancel_keeps_everything_and_quit_stops_it_without_a_tray_to_hide_in(window):
    life = life_of(window, with_tray=False)
    start_swarm(window)
    seen = answer_with("Cancel")
    window.close()
    assert seen and "3 agents of the built-in swarm" in seen[0][0]
    assert sorted(seen[0][1]) == sorted([QUIT_TEXT, "Cancel"])  # no tray: the window is never hidden
    assert window.isVisible() and not window.shut and window.launcher.running and window.service.loaded

    seen = answer_with(QUIT_TEXT, remember=True)
    window.close()
    assert seen and window.shut and not window.service.loaded and not window.launcher.running
    assert window.store.get("on_close") == QUIT and life.menu.on_close_actions[QUIT].isChecked()


def test_a_remembered_quit_is_not_asked_again(window):
    window.store.set("on_close", QUIT)
    life_of(window, with_tray=False).ask = never_asked
    start_swarm(window)
    window.close()
    assert window.shut


def test_quit_ends_the_coding_agents_and_keeps_their_worktrees(window, qapp, tmp_path, monkeypatch):
    life_of(window, with_tray=False)
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "hello.py").write_text("print('hello')\n")
    with_stand_in_agents(window, tmp_path, monkeypatch, "slow", folder)
    window.set_endpoint("http://127.0.0.1:9")  # the stand-in's "slow" task never calls it
    runs = window.harness.launcher.runs

    async def scenario():
        assert window.harness.start()
        await until(lambda: runs and runs[0].status == "running", "the agent to start")
        seen = answer_with("Cancel")
        window.close()
        assert seen and "1 coding agent" in seen[0][0] and not runs[0].finished
        seen = answer_with(QUIT_TEXT)
        window.close()
        assert seen and window.shut
        await until(lambda: runs[0].finished, "the agent to end")

    on_loop(qapp, scenario)
    assert runs[0].status == "stopped"
    assert [ws.name for ws in all_workspaces()] == [runs[0].name]  # its worktree is kept for Review


def test_keep_serving_in_the_tray_hides_the_window_and_serves_on(a_tray, window, qtbot):
    life = life_of(window, with_tray=True)
    qtbot.waitUntil(life.tray.icon.isVisible)
    start_swarm(window)
    seen = answer_with(KEEP_TEXT)
    window.close()
    assert seen and sorted(seen[0][1]) == sorted([KEEP_TEXT, QUIT_TEXT, "Cancel"])
    assert not window.isVisible() and not window.shut and window.service.loaded and window.launcher.running
    life.tray.show_requested.emit()  # the tray's Show
    assert window.isVisible()
    seen = answer_with(KEEP_TEXT, remember=True)
    window.close()
    assert seen and not window.isVisible() and window.store.get("on_close") == TRAY
    window.show()
    ask, life.ask = life.ask, never_asked
    window.close()  # remembered: hidden again without a question
    assert not window.isVisible() and not window.shut
    life.ask = ask

    # From the tray, hidden: its Quit is a quit asked for outright, so the question offers no tray.
    seen = answer_with(QUIT_TEXT)
    life.tray.quit_requested.emit()
    assert seen and sorted(seen[0][1]) == sorted([QUIT_TEXT, "Cancel"]) and window.shut and not window.service.loaded
    assert not life.tray.icon.isVisible()
