"""The harness panel: installed or not (with the install command to copy), and stand-in agents started,
counted from the request log and stopped on the app's qasync loop."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from PySide6 import QtCore

from swarm_panel.app.harness.launcher import Launcher
from swarm_panel.app.service.agents import RequestLog, RequestRecord
from tests.app.harness.fake_harness import fake_kind, missing_kind

SCENARIO_TIMEOUT_S = 60.0


@pytest.fixture
def folder(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    return work


def make_panel(qtbot, tmp_path, log=None, url="http://127.0.0.1:9", grace_s=5.0, fence=None):
    from swarm_panel.ui.panels.harness_panel import HarnessPanel

    fake, missing = fake_kind(tmp_path), missing_kind()
    launcher = Launcher(log, state_dir=tmp_path / "state", grace_s=grace_s, fence=fence)
    panel = HarnessPanel(log, lambda: url, kinds={fake.key: fake, missing.key: missing}, launcher=launcher)
    panel.unconfined.setChecked(True)  # where no fence works here, the tests launch unfenced
    qtbot.addWidget(panel)
    return panel


def on_loop(qapp, scenario) -> None:
    import qasync

    loop = qasync.QEventLoop(qapp)
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), SCENARIO_TIMEOUT_S))
    finally:
        loop.close()
        asyncio.set_event_loop(None)


async def until(condition, what: str) -> None:
    deadline = time.monotonic() + SCENARIO_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def cells(panel, row: int) -> list[str]:
    return [panel.table.item(row, column).text() for column in range(panel.table.columnCount())]


def test_each_harness_says_whether_it_is_installed_and_how_to_install_it(qtbot, tmp_path):
    panel = make_panel(qtbot, tmp_path)
    assert panel.installed["fake-agent"].text() == "installed"
    assert panel.where["fake-agent"].text() == panel.kinds["fake-agent"].executable
    assert panel.installed["missing-agent"].text() == "not installed"
    install = panel.where["missing-agent"]
    assert install.text() == "npm install -g missing-agent"
    assert install.textInteractionFlags() & QtCore.Qt.TextInteractionFlag.TextSelectableByMouse
    assert [panel.kind.itemText(i) for i in range(panel.kind.count())] == ["Fake agent",
                                                                          "Missing agent (not installed)"]
    panel.kind.setCurrentIndex(1)
    assert not panel.start()
    assert "npm install -g missing-agent" in panel.message.text()
    assert panel.table.rowCount() == 0


def test_without_a_fence_start_is_refused_until_unconfined_is_checked(qtbot, qapp, tmp_path, folder):
    from swarm_panel.app.fence.walls import NONE, Fence

    panel = make_panel(qtbot, tmp_path, fence=Fence(NONE, reason="bubblewrap (bwrap) is not installed"))
    panel.folder.setText(str(folder))
    panel.unconfined.setChecked(False)
    assert not panel.unconfined.isHidden()

    async def scenario():
        assert panel.start()
        await until(lambda: "nothing was launched" in panel.message.text(), "the refusal")

    on_loop(qapp, scenario)
    assert "bubblewrap (bwrap) is not installed" in panel.message.text()
    assert "Unconfined box" in panel.message.text() and panel.launcher.runs == []


def test_without_the_apps_loop_nothing_starts(qtbot, tmp_path):
    panel = make_panel(qtbot, tmp_path)
    assert not panel.start()
    assert "event loop" in panel.message.text() and panel.launcher.runs == []


def test_agents_started_show_their_turns_and_a_hung_one_stops(qtbot, qapp, tmp_path, folder):
    log = RequestLog()
    panel = make_panel(qtbot, tmp_path, log, grace_s=0.3)
    panel.folder.setText(str(folder))

    async def scenario():
        panel.task.setText("quiet")
        panel.count.setValue(2)
        assert panel.start()
        await until(lambda: len(panel.launcher.runs) == 2 and all(r.finished for r in panel.launcher.runs),
                    "the quiet agents to end")
        # The server would log these under the names their base URLs carry.
        log.record(RequestRecord(agent="fake-agent-1", endpoint="/v1/chat/completions", status=200,
                                 prompt_tokens=900, computed_tokens=900))
        log.record(RequestRecord(agent="fake-agent-1", endpoint="/v1/chat/completions", status=200,
                                 prompt_tokens=1000, computed_tokens=1234, reused_tokens=0))
        panel.refresh()
        assert cells(panel, 0) == ["fake-agent-1", "Fake agent", "exited", "2", "1,234", "0"]
        assert cells(panel, 1) == ["fake-agent-2", "Fake agent", "exited", "0", "–", "0"]
        assert "done" in panel.table.item(0, 0).toolTip()
        assert not panel.stop_all_button.isEnabled()

        panel.task.setText("hang")
        panel.count.setValue(1)
        assert panel.start()
        await until(lambda: len(panel.launcher.runs) == 3 and "hanging" in panel.launcher.runs[2].stdout.text,
                    "the hung agent to start")
        panel.refresh()
        assert cells(panel, 2)[:3] == ["fake-agent-3", "Fake agent", "running"]
        assert panel.stop_all_button.isEnabled()
        panel.table.selectRow(2)
        assert panel.selected() == ["fake-agent-3"]
        panel.stop_selected()
        await until(lambda: panel.launcher.runs[2].finished, "the stop")
        await asyncio.sleep(0)  # the stop's done-callback refreshes the table
        panel.refresh()
        # Inside the fence SIGTERM ends bwrap (-15), and the group's SIGKILL the harness; unfenced, the harness (-9).
        assert cells(panel, 2)[2] == "stopped"
        assert cells(panel, 2)[5] in ({"-9", "-15"} if hasattr(os, "killpg") else {"1"})

    on_loop(qapp, scenario)
    assert list((tmp_path / "state").iterdir()) == []  # every config home removed
    panel.resize(1400, 360)
    assert panel.grab().save(str(tmp_path / "harness.png"))
