"""The Coding agents tab's worktrees: four stand-in agents launched from the panel on a git repository edit the
same line in their own worktrees; the table shows their files and lines, the diff view the selected one's,
the first Apply lands and the second is refused naming the file; Discard all leaves nothing."""

from __future__ import annotations

from swarm_panel.app.harness.launcher import Launcher
from swarm_panel.app.workspace.records import all_workspaces
from tests.app.workspace.git_repo import make_repo, sh
from tests.app.workspace.stand_in import stand_in_kind, task
from tests.ui.test_harness_panel import on_loop, until


def test_four_agents_reviewed_one_applied_one_refused(qtbot, qapp, tmp_path):
    from swarm_panel.ui.panels.harness_panel import HarnessPanel

    repo = make_repo(tmp_path / "repo", {"story.txt": "one\ntwo\nthree\n"})
    kind = stand_in_kind(tmp_path)
    launcher = Launcher(state_dir=tmp_path / "state")
    panel = HarnessPanel(None, lambda: "http://127.0.0.1:9", kinds={kind.key: kind}, launcher=launcher)
    panel.unconfined.setChecked(True)  # where no fence works here, launched unfenced
    qtbot.addWidget(panel)
    panel.folder.setText(str(repo))
    panel.task.setText(task(write={"story.txt": "one\n{name} wrote this\nthree\n", "notes.md": "# {name}\n"}))
    panel.count.setValue(4)
    worktrees = panel.worktrees

    async def scenario():
        assert panel.start()
        await until(lambda: len(launcher.runs) == 4 and all(r.finished for r in launcher.runs), "the agents")

    on_loop(qapp, scenario)
    assert [r.completed for r in launcher.runs] == [True] * 4
    assert (repo / "story.txt").read_text() == "one\ntwo\nthree\n" and not (repo / "notes.md").exists()
    worktrees.poll()
    worktrees.wait_idle()
    table = [[worktrees.table.item(r, c).text() for c in range(3, 5)] + [worktrees.table.item(r, 2).text()]
             for r in range(worktrees.table.rowCount())]
    assert table == [["+2", "−1", "2"]] * 4
    assert [worktrees.table.item(r, 5).text() for r in range(4)] == [f"swarm-panel/stand-in-{n}" for n in range(1, 5)]

    worktrees.table.selectRow(1)
    worktrees.wait_idle()
    assert "+stand-in-2 wrote this" in worktrees.diff.toPlainText()
    worktrees.table.selectRow(0)
    worktrees.apply_selected()
    worktrees.wait_idle()
    assert worktrees.message.text().startswith("Applied stand-in-1 to main (fast-forward")
    assert (repo / "story.txt").read_text() == "one\nstand-in-1 wrote this\nthree\n"
    worktrees.table.selectRow(1)
    worktrees.apply_selected()
    worktrees.wait_idle()
    assert "stand-in-2 conflicts with main in notes.md, story.txt: nothing was applied" in worktrees.message.text()
    assert (repo / "story.txt").read_text() == "one\nstand-in-1 wrote this\nthree\n"
    worktrees.poll()
    worktrees.wait_idle()
    assert [worktrees.table.item(r, 1).text() for r in range(4)] == ["applied", "kept", "kept", "kept"]
    panel.resize(1200, 900)
    assert panel.grab().save(str(tmp_path / "worktrees.png"))

    worktrees.discard_all()
    worktrees.wait_idle()
    worktrees.wait_idle()
    assert worktrees.table.rowCount() == 0 and all_workspaces() == []
    assert sh(repo, "branch", "--list", "swarm-panel/*") == ""
    panel.shutdown()
