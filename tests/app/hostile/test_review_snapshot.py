"""Apply lands what was reviewed: the snapshot taken when the agent ended. A tree written after that (as a
process the agent left behind would write it) is said to have moved on, review still shows the snapshot,
and Apply refuses, the user's repository or folder untouched. While the agent runs, review is of its live
tree and says it is not final."""

from __future__ import annotations

import asyncio

import pytest

from swarm_panel.app.harness.launcher import Launcher
from swarm_panel.app.workspace.changes import changes, diff_text
from swarm_panel.app.workspace.git import WorkspaceError
from swarm_panel.app.workspace.land import apply
from swarm_panel.app.workspace.records import all_workspaces
from tests.app.hostile.harness import attack, hostile_kind
from tests.app.hostile.scene import URL, cli, each_fence, hostile
from tests.app.workspace.git_repo import make_repo, sh

BENIGN = '''
with open("story.txt", "w") as f:
    f.write("benign\\n")
'''


def _user_folder(tmp_path, mode):
    if mode == "worktree":
        return make_repo(tmp_path / "repo", {"story.txt": "the user's line\n"})
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "story.txt").write_text("the user's line\n")
    return folder


@pytest.mark.parametrize("mode", ["worktree", "copy"])
@pytest.mark.parametrize("fence", each_fence())
def test_a_tree_written_after_its_snapshot_is_refused_at_apply(tmp_path, fence, mode, capsys):
    folder = _user_folder(tmp_path, mode)
    ws = hostile(tmp_path, fence, folder, BENIGN).workspace
    assert ws.snapshot is not None and not ws.running()
    found = changes(ws)
    assert found.final and not found.moved_on and found.summary() == "1 file +1 -1"

    (ws.tree / "story.txt").write_text("EVIL\n")  # a survivor of the agent, after its end

    found = changes(ws)
    assert found.moved_on and found.summary() == "1 file +1 -1"
    text = diff_text(ws)
    assert "changed after its snapshot" in text and "+benign" in text and "EVIL" not in text
    assert "tree moved on after its snapshot: Apply refuses it" in cli(capsys, "agents", "list")
    with pytest.raises(WorkspaceError, match=rf"agent {ws.name}'s tree changed after its snapshot was taken when "
                                             r"it ended .*nothing was applied"):
        apply(ws)
    assert (folder / "story.txt").read_text() == "the user's line\n"
    if mode == "worktree":
        assert sh(folder, "status", "--porcelain") == "" and sh(folder, "log", "--format=%s") == "start"

    (ws.tree / "story.txt").write_text("benign\n")  # back to what was reviewed: it lands
    assert apply(ws) and (folder / "story.txt").read_text() == "benign\n"


def test_a_running_agent_is_reviewed_as_its_live_tree_not_final(tmp_path, capsys):
    repo = _user_folder(tmp_path, "worktree")
    code = BENIGN + "print('{}', flush=True)\ntime.sleep(60)\n"

    async def scenario():
        # This machine's fence; unfenced where it has none (.ci/fence_lanes): the review reads the tree alike.
        launcher = Launcher(state_dir=tmp_path / "state", grace_s=0.5, unconfined=True)
        [run] = await launcher.start(hostile_kind(tmp_path), repo, URL, attack(code))
        while "{}" not in run.stdout.text:
            assert not run.finished, run.stderr.text
            await asyncio.sleep(0.05)
        [listed] = all_workspaces()  # as another process (the CLI) reads it
        found = changes(listed)
        assert listed.running() and not found.final and found.summary() == "1 file +1 -1"
        assert diff_text(listed).startswith(f"# agent {listed.name}'s live tree, not final")
        listing = cli(capsys, "agents", "list")
        assert "running" in listing and "live tree, not final" in listing
        assert listed.snapshot is None
        await launcher.stop(run.name)

    asyncio.run(scenario())
    [ended] = all_workspaces()
    assert ended.snapshot is not None and changes(ended).final


def test_an_agent_that_ended_unwatched_is_snapshotted_when_its_diff_is_read_and_an_older_record_is_adopted(
        tmp_path):
    from swarm_panel.app.workspace.create import create
    from swarm_panel.app.workspace.records import find, save

    repo = _user_folder(tmp_path, "worktree")
    ws = create(repo, "unwatched-1")  # made, then its agent ended with no launcher to take the snapshot
    (ws.tree / "story.txt").write_text("written while nobody watched\n")
    assert not changes(ws).final
    with pytest.raises(WorkspaceError, match="ended with no snapshot of its tree taken: review it first"):
        apply(ws)
    assert diff_text(ws).startswith("# agent unwatched-1's snapshot ") and ws.snapshot is not None
    assert find("unwatched-1").snapshot == ws.snapshot  # recorded

    # A record written before workspaces had a git folder of their own: one is made on first read.
    import shutil

    shutil.rmtree(ws.git_dir)
    ws.common = ""
    save(ws)
    older = find("unwatched-1")
    assert changes(older).summary() == "1 file +1 -1" and older.git_dir.is_dir() and older.common
    assert apply(older).how == "fast-forward"
    assert (repo / "story.txt").read_text() == "written while nobody watched\n"
