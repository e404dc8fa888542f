"""The next launch restores the session: the policy, the Coding agents tab's folder, task and count, and the kept
worktrees in Review, those of an earlier session marked and counted."""

from __future__ import annotations

import time

from swarm_panel.app.workspace.create import create
from swarm_panel.ui.toolkit.settings_store import SettingsStore
from tests.app.workspace.git_repo import make_repo
from tests.ui.test_ui_common import fast_service, no_user_config  # noqa: F401 - a fixture


def open_window(qtbot, store):
    from swarm_panel.ui.shell.main_window import MainWindow

    service = fast_service()
    service.start()
    window = MainWindow(service, store)
    qtbot.addWidget(window)
    window.show()
    return window


def test_the_next_launch_opens_where_the_last_one_closed(qtbot, no_user_config, tmp_path):
    from swarm_panel.ui.shell.app_main import _settings

    path = tmp_path / "panel.ini"
    first = open_window(qtbot, SettingsStore(path))
    first.harness.folder.setText(str(tmp_path / "project"))
    first.harness.task.setText("Add a test for hello.py.")
    first.harness.count.setValue(3)
    first.apply_scheduler(policy="continuous")
    first.close()
    assert first.shut and not first.service.loaded

    repo = make_repo(tmp_path / "repo", {"hello.py": "print('hello')\n"})
    kept = create(repo, "codex-1")  # an agent's worktree kept from that session
    time.sleep(0.01)  # made strictly before the next window opens

    store = SettingsStore(path)
    assert _settings(store, None, None, 0, None).policy == "continuous"
    second = open_window(qtbot, store)
    try:
        assert (second.harness.folder.text(), second.harness.task.text(), second.harness.count.value()) == (
            str(tmp_path / "project"), "Add a test for hello.py.", 3)
        review = second.harness.worktrees
        qtbot.waitUntil(lambda: review.table.rowCount() == 1)
        assert review.earlier.isVisible() and review.earlier.text().startswith("1 worktree is kept from before")
        assert review.table.item(0, 0).text() == kept.name and review.table.item(0, 0).font().italic()
        assert review.table.item(0, 0).toolTip().startswith("From an earlier session.")
    finally:
        second.close()
        second.service.stop()
