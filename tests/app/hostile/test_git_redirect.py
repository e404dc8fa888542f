"""An agent that rewrites the git its tree points at: a worktree's `.git` file replaced by a folder of its own
(its config's fsmonitor, pager, external diff, editor and filters, and its hooks, all the payload; the
user's objects borrowed through alternates), a nested repository with the same config, and a copy given a
`.git`. The host's review reads the tree as data: list, diff, the panel's survey, apply and discard run
none of it, and still see the agent's files. Then plain `git status` in the tree runs it: the attack was live.
"""

from __future__ import annotations

import subprocess

import pytest

from swarm_panel.app.workspace.changes import changes, diff_text
from swarm_panel.app.workspace.land import apply, discard
from tests.app.hostile.harness import seen
from tests.app.hostile.scene import cli, each_fence, hostile, payload
from tests.app.workspace.git_repo import make_repo, sh

# Inside the fence, in its tree: a git folder of its own wherever git would look, every hook and every
# command its config can name set to the payload.
REDIRECT = '''
def fake_git(folder, objects):
    for sub in ("objects/info", "refs/heads", "hooks", "info"):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    with open(os.path.join(folder, "HEAD"), "w") as f:
        f.write("ref: refs/heads/main\\n")
    if objects:
        with open(os.path.join(folder, "objects/info/alternates"), "w") as f:
            f.write(objects + "\\n")
    run = P["payload"]
    with open(os.path.join(folder, "config"), "w") as f:
        f.write(f"""[core]
\\trepositoryformatversion = 0
\\tbare = false
\\tfsmonitor = {run}
\\tpager = {run}
\\teditor = {run}
\\thooksPath = {os.path.abspath(os.path.join(folder, "hooks"))}
[diff]
\\texternal = {run}
[diff "evil"]
\\ttextconv = {run}
[filter "evil"]
\\tclean = {run}
\\tsmudge = {run}
\\trequired = true
""")
    with open(os.path.join(folder, "info/attributes"), "w") as f:
        f.write("* filter=evil diff=evil\\n")
    for hook in ("post-index-change", "pre-commit", "post-checkout", "reference-transaction", "pre-auto-gc",
                 "post-merge", "post-commit", "pre-merge-commit"):
        path = os.path.join(folder, "hooks", hook)
        with open(path, "w") as f:
            f.write(f"#!/bin/sh\\n{run}\\n")
        os.chmod(path, 0o755)

if os.path.isfile(".git"):
    os.remove(".git")
fake_git(".git", P["objects"])
os.makedirs("vendor/lib", exist_ok=True)
fake_git("vendor/lib/.git", P["objects"])
with open("vendor/lib/.git/refs/heads/main", "w") as f:
    f.write(P["base"] + "\\n")
with open(".gitattributes", "w") as f:
    f.write("* filter=evil diff=evil\\n")
with open("story.txt", "a") as f:
    f.write("the agent's line\\n")
try:
    with open(os.path.join(P["git_dir"], "config"), "a") as f:
        f.write("[core]\\n\\tfsmonitor = " + P["payload"] + "\\n")
    seen["git_dir"] = "wrote"
except OSError as exc:
    seen["git_dir"] = exc.strerror
seen["tree"] = sorted(os.listdir("."))
'''


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo", {"story.txt": "the user's line\n"})


def _the_survey_runs_nothing(marker, ws):
    survey = pytest.importorskip("swarm_panel.ui.panels.agent_worktrees")._survey
    [(listed, state, found)] = survey(None)
    assert listed.name == ws.name and state == "kept" and found is not None and len(found.files) == 3
    assert not marker.exists()


@pytest.mark.parametrize("fence", each_fence())
def test_a_worktree_whose_git_the_agent_replaced_is_read_as_data(repo, tmp_path, fence, capsys):
    marker = tmp_path / "payload-ran"
    base = sh(repo, "rev-parse", "HEAD")
    run = hostile(tmp_path, fence, repo, REDIRECT, payload=payload(marker), objects=str(repo / ".git" / "objects"),
                  base=base, git_dir=tmp_path / "unused")
    ws = run.workspace
    assert (ws.tree / ".git").is_dir() and (ws.tree / "vendor/lib/.git/config").is_file()  # the attack is in place

    found = {c.path: (c.status, c.added, c.removed, c.flags) for c in changes(ws).files}
    assert found == {"story.txt": ("modified", 1, 0, ()), ".gitattributes": ("added", 1, 0, ("attributes",)),
                     "vendor/lib": ("added", 1, 0, ("submodule",))}
    assert not marker.exists()
    text = diff_text(ws)
    assert "+the agent's line" in text and f"+Subproject commit {base}" in text
    assert not marker.exists()
    listed = cli(capsys, "agents", "list")
    assert "3 files +3 -0, 2 flagged" in listed and "! vendor/lib: submodule" in listed
    assert "+the agent's line" in cli(capsys, "agents", "diff", ws.name)
    assert "modified  +1      -0      story.txt" in cli(capsys, "agents", "diff", ws.name, "--stat")
    assert not marker.exists()
    _the_survey_runs_nothing(marker, ws)

    done = apply(ws)
    assert done.how == "fast-forward" and not marker.exists()
    assert (repo / "story.txt").read_text() == "the user's line\nthe agent's line\n"
    assert sh(repo, "ls-tree", "HEAD", "vendor/lib").startswith(f"160000 commit {base}")
    assert not (repo / "vendor" / "lib" / ".git").exists()  # a submodule lands as its commit, not its git

    # The same tree read as git would find it: the payload runs. The attack above was live.
    subprocess.run(["git", "status"], cwd=ws.tree, capture_output=True, check=False)
    assert marker.exists()
    marker.unlink()
    discard(ws)
    assert not ws.home.exists() and not marker.exists()
    assert sh(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


@pytest.mark.parametrize("fence", each_fence())
def test_a_copys_repository_is_out_of_the_agents_reach_and_a_git_it_makes_is_ignored(tmp_path, fence, capsys):
    from swarm_panel.app.workspace.records import default_root

    marker = tmp_path / "payload-ran"
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "story.txt").write_text("the user's line\n")
    git_dir = default_root() / "hostile-1" / "git"  # where its repository will be
    run = hostile(tmp_path, fence, folder, REDIRECT, payload=payload(marker), objects="", base="0" * 40,
                  git_dir=git_dir)
    ws = run.workspace
    assert ws.mode == "copy" and ws.git_dir == git_dir
    # Its repository: read-only (or hidden) under bubblewrap, refused by Landlock.
    assert seen(run)["git_dir"] in ("Read-only file system", "No such file or directory", "Permission denied")
    assert "fsmonitor" not in (git_dir / "config").read_text()

    found = {c.path: c.flags for c in changes(ws).files}
    assert found == {"story.txt": (), ".gitattributes": ("attributes",)}  # a nested repo with no commit: left out
    assert "+the agent's line" in diff_text(ws) and "! .gitattributes: attributes" in cli(capsys, "agents", "list")
    assert not marker.exists()
    done = apply(ws)
    assert done.how == "files written" and not marker.exists()
    assert (folder / "story.txt").read_text() == "the user's line\nthe agent's line\n"
    assert not (folder / ".git").exists() and not (folder / "vendor").exists()
    discard(ws)
    assert not marker.exists()
