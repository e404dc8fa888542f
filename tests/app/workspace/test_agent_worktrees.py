"""Agents in their own worktrees, inside the fence, reviewed before they land: a scripted stand-in harness
launched through the real launcher against a real git repository."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from swarm_panel.app.fence.choose import detect
from swarm_panel.app.fence.walls import BWRAP, LANDLOCK, NONE, Fence
from swarm_panel.app.harness.launcher import UNCONFINED, FenceRefused, Launcher
from swarm_panel.app.workspace.changes import changes, diff_text
from swarm_panel.app.workspace.git import WorkspaceError
from swarm_panel.app.workspace.land import apply, discard
from swarm_panel.app.workspace.records import all_workspaces
from tests.app.workspace.git_repo import make_repo, sh
from tests.app.workspace.stand_in import report, stand_in_kind, task

URL = "http://127.0.0.1:9"  # the stand-in sends no request

FENCES = {kind: detect(kind) for kind in (BWRAP, LANDLOCK)}
# What a write the fence refuses says: bubblewrap's mounts are read-only, Landlock denies the access.
REFUSED = {BWRAP: "Read-only file system", LANDLOCK: "Permission denied"}


def each_fence():
    return [pytest.param(fence, id=kind, marks=pytest.mark.skipif(not fence.available, reason=fence.reason))
            for kind, fence in FENCES.items()]


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path / "repo", {"story.txt": "first line\nthe line agents fight over\nlast line\n",
                                         "old.txt": "to be deleted\n", "ignored.log": "ignored\n",
                                         ".gitignore": "*.log\n"})


def branches(repo: Path) -> list[str]:
    return sh(repo, "branch", "--list", "--format=%(refname:short)", "swarm-panel/*").split()


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file of the user's tree, .git left out, byte for byte."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(folder).parts}


def launch(launcher: Launcher, kind, folder: Path, what: str, n: int = 1):
    async def scenario():
        runs = await launcher.start(kind, folder, URL, what, n)
        assert await launcher.wait(60)
        return runs

    return asyncio.run(scenario())


@pytest.mark.parametrize("fence", each_fence())
def test_a_fenced_agent_changes_only_its_worktree_until_apply(repo, tmp_path, fence):
    print(f"fence: {fence.describe()}")
    kind = stand_in_kind(tmp_path)
    before = snapshot(repo)
    marker = uuid.uuid4().hex
    home_file = Path.home() / f"swarm-panel-fence-test-{marker}"
    tmp_file = Path("/tmp") / f"swarm-panel-fence-test-{marker}"
    outside = [str(repo / "story.txt"), str(repo / "new-in-user-tree.txt"), str(home_file), str(tmp_file),
               "/etc/swarm-panel-fence-test"]
    launcher = Launcher(state_dir=tmp_path / "state", fence=fence)
    [run] = launch(launcher, kind, repo, task(write={"story.txt": "first line\nagent's line\nlast line\n",
                                                      "added.txt": "new\n"}, delete=["old.txt"], outside=outside))
    assert run.completed, run.stderr.text
    assert run.confinement == fence.kind
    said = report(run)
    assert said["argv"][-2] == "--yolo"  # fenced, its shell is unlocked (the task follows)
    # /etc: refused. The user's tree (here under /tmp), HOME and /tmp: refused by Landlock; under bubblewrap
    # they are its own throwaway tmpfs (the host's files are checked below).
    refused = REFUSED[fence.kind]
    assert said["outside"]["/etc/swarm-panel-fence-test"] == refused
    if fence.kind == LANDLOCK:
        assert said["outside"][str(repo / "story.txt")] == refused
        assert said["outside"][str(repo / "new-in-user-tree.txt")] == refused
        assert said["outside"][str(home_file)] == refused and said["outside"][str(tmp_file)] == refused
        assert said["tmp"] == "wrote" and said["cwd"] == run.workspace.folder
    else:
        assert said["cwd"].startswith("/tmp/swarm-panel-stand-in-work-")  # its slot's path, every session
    assert not home_file.exists() and not tmp_file.exists()
    assert snapshot(repo) == before

    ws = run.workspace
    assert ws.branch == "swarm-panel/stand-in-1" and Path(ws.folder) == ws.tree
    found = {c.path: (c.status, c.added, c.removed) for c in changes(ws).files}
    assert found == {"story.txt": ("modified", 1, 1), "added.txt": ("added", 1, 0), "old.txt": ("deleted", 0, 1)}
    assert "+agent's line" in diff_text(ws) and "-the line agents fight over" in diff_text(ws)
    assert snapshot(repo) == before  # reading its changes wrote nothing of the user's

    done = apply(ws)
    assert done.how == "fast-forward" and sh(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert (repo / "story.txt").read_text() == "first line\nagent's line\nlast line\n"
    assert (repo / "added.txt").read_text() == "new\n" and not (repo / "old.txt").exists()
    assert (repo / "ignored.log").read_text() == "ignored\n"
    assert sh(repo, "status", "--porcelain") == ""
    with pytest.raises(WorkspaceError, match="already applied to main"):
        apply(ws)

    discard(ws)
    assert not ws.home.exists()
    assert sh(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert branches(repo) == []
    assert all_workspaces() == []


def test_four_agents_on_the_same_line_get_four_branches_and_the_second_apply_is_refused(repo, tmp_path):
    kind = stand_in_kind(tmp_path)
    before = snapshot(repo)
    runs = launch(Launcher(state_dir=tmp_path / "state", unconfined=True), kind, repo,
                  task(write={"story.txt": "first line\n{name}'s line\nlast line\n"}), n=4)
    assert [r.completed for r in runs] == [True] * 4, [r.stderr.text for r in runs]
    assert branches(repo) == [f"swarm-panel/stand-in-{n}" for n in (1, 2, 3, 4)]
    assert snapshot(repo) == before
    for run in runs:
        assert changes(run.workspace).summary() == "1 file +1 -1"

    apply(runs[0].workspace)
    assert "stand-in-1's line" in (repo / "story.txt").read_text()
    landed = snapshot(repo)
    head = sh(repo, "rev-parse", "HEAD")
    with pytest.raises(WorkspaceError, match=r"conflicts with main in story\.txt: nothing was applied"):
        apply(runs[1].workspace)
    assert snapshot(repo) == landed and sh(repo, "rev-parse", "HEAD") == head
    assert sh(repo, "status", "--porcelain") == "" and not (repo / ".git" / "MERGE_HEAD").exists()
    for run in runs:
        discard(run.workspace)
    assert branches(repo) == [] and all_workspaces() == []


def test_without_a_fence_nothing_launches_unless_the_user_opts_in(repo, tmp_path):
    kind = stand_in_kind(tmp_path)
    none = Fence(NONE, reason="bubblewrap (bwrap) is not installed")
    with pytest.raises(FenceRefused, match=r"no fence can hold the agents here \(bubblewrap.*--unconfined"):
        launch(Launcher(state_dir=tmp_path / "state", fence=none), kind, repo, task(write={"x.txt": "x\n"}))
    assert all_workspaces() == [] and branches(repo) == []  # refused before any worktree was made
    [opted] = launch(Launcher(state_dir=tmp_path / "state", fence=none, unconfined=True), kind, repo, task())
    assert opted.confinement == UNCONFINED and report(opted)["argv"][-2] == "--yolo"
    assert report(opted)["cwd"] == opted.workspace.folder  # its worktree, still: never the user's tree


def test_a_fence_that_was_asked_for_and_cannot_run_refuses_even_with_the_opt_in(repo, tmp_path):
    named = Fence(NONE, reason="bubblewrap (bwrap) is not installed", asked=BWRAP)
    launcher = Launcher(state_dir=tmp_path / "state", fence=named, unconfined=True)
    with pytest.raises(FenceRefused, match="the bubblewrap fence was asked for and cannot run here: bubblewrap"):
        launch(launcher, stand_in_kind(tmp_path), repo, task())
    assert launcher.runs == [] and all_workspaces() == []


def test_a_name_whose_branch_is_taken_moves_to_the_next_and_a_crash_leaves_them_listed(repo, tmp_path):
    kind = stand_in_kind(tmp_path)
    sh(repo, "branch", "swarm-panel/stand-in-1")  # the user's own, or a kept one from an older session
    [run] = launch(Launcher(state_dir=tmp_path / "state", unconfined=True), kind, repo, task(write={"x.txt": "x\n"}))
    assert run.name == "stand-in-2" and sh(repo, "rev-parse", "swarm-panel/stand-in-1")  # left alone
    # A new launcher (the panel restarted after a crash) finds it on disk and numbers past it.
    [kept] = all_workspaces()
    assert kept.name == "stand-in-2" and not kept.running() and changes(kept).summary() == "1 file +1 -0"
    [later] = launch(Launcher(state_dir=tmp_path / "state", unconfined=True), kind, repo, task())
    assert later.name == "stand-in-3"


def test_apply_waits_for_a_running_agent_and_discard_too(repo, tmp_path):
    kind = stand_in_kind(tmp_path)

    async def scenario():
        launcher = Launcher(state_dir=tmp_path / "state", grace_s=0.5, unconfined=True)
        [run] = await launcher.start(kind, repo, URL, task(write={"x.txt": "x\n"}, sleep=60))
        while "{" not in run.stdout.text:
            assert not run.finished, run.stderr.text
            await asyncio.sleep(0.05)
        [listed] = all_workspaces()  # as another process (the CLI) reads it
        assert listed.running()
        with pytest.raises(WorkspaceError, match="still running"):
            apply(listed)
        with pytest.raises(WorkspaceError, match="still running"):
            discard(listed)
        await launcher.stop(run.name)

    asyncio.run(scenario())
    [listed] = all_workspaces()
    assert not listed.running()
    assert apply(listed).files == ("x.txt",) and (repo / "x.txt").read_text() == "x\n"


def test_uncommitted_changes_are_refused_and_a_dirty_file_the_merge_touches_blocks_apply(repo, tmp_path):
    kind = stand_in_kind(tmp_path)
    (repo / "story.txt").write_text("the user's unsaved work\n")
    launcher = Launcher(state_dir=tmp_path / "state", unconfined=True)
    with pytest.raises(WorkspaceError, match=r"uncommitted changes \(story\.txt\).*git stash"):
        launch(launcher, kind, repo, task())
    assert all_workspaces() == [] and branches(repo) == []
    sh(repo, "stash")
    [run] = launch(launcher, kind, repo, task(write={"story.txt": "the agent's\n"}))
    sh(repo, "stash", "pop")
    dirty = snapshot(repo)
    with pytest.raises(WorkspaceError, match=r"uncommitted changes to story\.txt"):
        apply(run.workspace)
    assert snapshot(repo) == dirty


def test_a_folder_that_is_no_repository_is_copied_and_applied_back_file_by_file(tmp_path):
    kind = stand_in_kind(tmp_path)
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "a.txt").write_text("a\n")
    (folder / "b.txt").write_text("b\n")
    launcher = Launcher(state_dir=tmp_path / "state", unconfined=True)
    first, second = (launch(launcher, kind, folder, task(write={"a.txt": f"agent {n}\n"}, delete=["b.txt"]))[0]
                     for n in (1, 2))
    assert first.workspace.mode == "copy" and (folder / "a.txt").read_text() == "a\n"
    assert not (folder / ".git").exists()
    assert apply(first.workspace).how == "files written"
    assert (folder / "a.txt").read_text() == "agent 1\n" and not (folder / "b.txt").exists()
    with pytest.raises(WorkspaceError, match=r"a\.txt, b\.txt changed in .* since agent stand-in-2 started"):
        apply(second.workspace)
    assert (folder / "a.txt").read_text() == "agent 1\n"


@pytest.mark.parametrize("make", ["missing", "bare", "detached", "empty"])
def test_a_folder_no_agent_can_start_from_is_refused_with_the_reason(make, repo, tmp_path):
    reasons = {"missing": "no such folder", "bare": "bare repository", "detached": "detached HEAD",
               "empty": "no commit yet"}
    folder = {"missing": tmp_path / "absent", "bare": tmp_path / "bare.git", "detached": repo,
              "empty": tmp_path / "empty"}[make]
    if make == "bare":
        sh(tmp_path, "clone", "-q", "--bare", str(repo), str(folder))
    elif make == "detached":
        sh(repo, "checkout", "-q", "--detach")
    elif make == "empty":
        folder.mkdir()
        sh(folder, "init", "-q")
    with pytest.raises(WorkspaceError, match=reasons[make]):
        launch(Launcher(state_dir=tmp_path / "state", unconfined=True), stand_in_kind(tmp_path), folder, task())
    assert all_workspaces() == []


def test_a_copy_past_the_limit_or_a_full_disk_keeps_nothing(tmp_path, monkeypatch):
    import errno
    import shutil

    from swarm_panel.app.workspace.create import create

    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "big.bin").write_bytes(b"x" * 4096)
    with pytest.raises(WorkspaceError, match="not a git repository.*more than 0 MiB.*git init"):
        create(folder, "agent-1", copy_limit=1024)

    def full(src, dst, **_):
        raise OSError(errno.ENOSPC, "No space left on device", dst)

    monkeypatch.setattr(shutil, "copy2", full)
    with pytest.raises(WorkspaceError, match=r"No space left on device.*nothing was kept.*untouched"):
        create(folder, "agent-1")
    assert all_workspaces() == [] and (folder / "big.bin").stat().st_size == 4096


def test_a_workspace_folder_inside_the_copied_folder_is_not_copied_into_itself(tmp_path):
    from swarm_panel.app.workspace.create import create

    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "a.txt").write_text("a\n")
    root = folder / ".worktrees"
    ws = create(folder, "agent-1", root)
    assert sorted(p.name for p in ws.tree.iterdir()) == ["a.txt"]  # its repository lies beside it
    assert (ws.git_dir / "HEAD").is_file()
    assert create(folder, "agent-2", root).tree.is_dir()


def test_apply_onto_a_branch_that_moved_on_makes_a_merge_commit(repo, tmp_path):
    [run] = launch(Launcher(state_dir=tmp_path / "state", unconfined=True), stand_in_kind(tmp_path), repo,
                   task(write={"added.txt": "the agent's\n"}))
    (repo / "old.txt").write_text("the user's own commit meanwhile\n")
    sh(repo, "commit", "-qam", "meanwhile")
    done = apply(run.workspace)
    assert done.how == "merge commit" and done.files == ("added.txt",)
    assert sh(repo, "log", "-1", "--format=%s") == "Merge agent stand-in-1 (swarm-panel/stand-in-1)"
    assert sh(repo, "rev-list", "--count", "--merges", "HEAD") == "1"
    assert (repo / "added.txt").read_text() == "the agent's\n"
    assert (repo / "old.txt").read_text() == "the user's own commit meanwhile\n"


@pytest.mark.skipif(not FENCES[BWRAP].available, reason=FENCES[BWRAP].reason)
def test_a_recipe_reads_the_real_worktree_while_the_harness_sees_the_fences_path(repo, tmp_path):
    [run] = launch(Launcher(state_dir=tmp_path / "state", fence=FENCES[BWRAP]), stand_in_kind(tmp_path, "aider"), repo,
                   task(write={"story.txt": "aider's\n"}))
    assert run.completed, run.error or run.stderr.text
    said = report(run)
    assert said["cwd"].startswith("/tmp/swarm-panel-stand-in-work-")
    assert said["argv"][-2:] == ["old.txt", "story.txt"]  # aider's files, listed from the real worktree
    assert changes(run.workspace).summary() == "1 file +1 -3"
