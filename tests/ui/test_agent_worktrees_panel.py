"""The Coding agents tab's worktrees: four stand-in agents launched from the panel on a git repository edit the
same line in their own worktrees; the table shows their files and lines, the diff view the selected one's,
the first Apply lands and the second is refused naming the file; Discard all leaves nothing."""

from __future__ import annotations

from swarm_panel.app.harness.launcher import Launcher
from swarm_panel.app.workspace.records import all_workspaces
from tests.app.workspace.git_repo import make_repo, sh
from tests.app.workspace.stand_in import stand_in_kind, task
from tests.ui.test_harness_panel import on_loop, until


def rows(worktrees) -> list[list[str]]:
    table = worktrees.table
    return [[table.item(r, c).text() for c in range(table.columnCount())] for r in range(table.rowCount())]


def shown(qtbot, worktrees, wanted) -> None:
    """Asks for surveys until the table shows what `wanted` (of its rows) waits for."""
    def ready() -> bool:
        worktrees.poll()  # a no-op while one is under way: its result comes first
        worktrees.wait_idle()
        return wanted(rows(worktrees))

    qtbot.waitUntil(ready, timeout=30_000)


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
    # A survey begun while the agents ran may still be on its way: the table is read once one shows all four
    # agents ended with their snapshots, whatever surveys came before.
    shown(qtbot, worktrees, lambda table: [row[1] for row in table] == ["kept"] * 4)
    assert [row[2:6] for row in rows(worktrees)] == [["2", "+2", "−1", ""]] * 4
    assert [row[6] for row in rows(worktrees)] == [f"swarm-panel/stand-in-{n}" for n in range(1, 5)]

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
    shown(qtbot, worktrees, lambda table: [row[1] for row in table] == ["applied", "kept", "kept", "kept"])
    panel.resize(1200, 900)
    assert panel.grab().save(str(tmp_path / "worktrees.png"))

    worktrees.discard_all()
    worktrees.wait_idle()
    worktrees.wait_idle()
    assert worktrees.table.rowCount() == 0 and all_workspaces() == []
    assert sh(repo, "branch", "--list", "swarm-panel/*") == ""
    panel.shutdown()


def test_a_flagged_file_is_marked_in_the_table_its_tooltip_and_the_diff(qtbot, qapp, tmp_path):
    from swarm_panel.ui.panels.agent_worktrees import AgentWorktrees

    repo = make_repo(tmp_path / "repo", {"story.txt": "one\n"})
    launcher = Launcher(state_dir=tmp_path / "state", unconfined=True)  # where no fence runs here

    async def scenario():
        await launcher.start(stand_in_kind(tmp_path), repo, "http://127.0.0.1:9",
                             task(write={".envrc": "echo entered\n", "story.txt": "two\n"}))
        assert await launcher.wait(60)

    on_loop(qapp, scenario)
    worktrees = AgentWorktrees()
    qtbot.addWidget(worktrees)
    shown(qtbot, worktrees, lambda table: len(table) == 1 and table[0][1] == "kept")
    [row] = rows(worktrees)
    assert row[2:6] == ["2", "+2", "−1", "⚑ 1"]
    assert "added .envrc +1 −0  ⚑ runs on its own" in worktrees.table.item(0, 5).toolTip()
    worktrees.select("stand-in-1")
    qtbot.waitUntil(lambda: "# flagged: .envrc: runs on its own" in worktrees.diff.toPlainText(), timeout=30_000)
    assert worktrees.diff.toPlainText().startswith("# agent stand-in-1's snapshot ")
    worktrees.shutdown()
