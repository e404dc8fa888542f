"""What review shows of a change a line count hides: links and where they point (one out of the tree refused
at Apply), mode changes, submodules, .gitattributes and files that run on their own, flagged in `agents list`,
`agents diff` and its --stat; and attributes naming filters, drivers and encodings, which run nothing and
block nothing, even where the user's own config defines the drivers they name."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarm_panel.app.workspace.changes import changes, diff_text
from swarm_panel.app.workspace.git import WorkspaceError
from swarm_panel.app.workspace.land import apply
from tests.app.hostile.scene import cli, each_fence, hostile, payload
from tests.app.workspace.git_repo import make_repo, sh

LINKS = '''
os.symlink(P["key"], "key")
os.symlink("../../../etc/passwd", "up")
os.symlink(".git/config", "gitcfg")
os.symlink("story.txt", "inside")
os.chmod("run.sh", 0o755)
os.makedirs(".github/workflows")
with open(".github/workflows/ci.yml", "w") as f:
    f.write("on: push\\njobs: {}\\n")
with open(".envrc", "w") as f:
    f.write("echo hi\\n")
with open(".gitattributes", "w") as f:
    f.write("*.txt diff=evil\\n")
os.makedirs("tools")
with open("tools/new.sh", "w") as f:
    f.write("#!/bin/sh\\n")
os.chmod("tools/new.sh", 0o755)
'''

ATTRIBUTES = '''
with open(".gitattributes", "w") as f:
    f.write("[attr]evil filter=evil diff=evil\\n* evil working-tree-encoding=NOPE-ENC eol=crlf text ident\\n")
with open("notes.txt", "wb") as f:
    f.write("caf\\u00e9 $Id$\\n".encode())
with open("story.txt", "a") as f:
    f.write("the agent's line\\n")
'''


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo", {"story.txt": "the user's line\n", "run.sh": "echo run\n"})


@pytest.mark.parametrize("fence", each_fence())
def test_links_modes_and_self_running_files_are_flagged_and_a_link_out_is_refused(repo, tmp_path, fence, capsys):
    key = Path.home() / ".ssh" / "id_ed25519"
    ws = hostile(tmp_path, fence, repo, LINKS, key=key).workspace
    found = {c.path: (c.shown(), c.flags) for c in changes(ws).files}
    assert found == {
        "key": (f"key -> {key}", ("link outside the tree",)),
        "up": ("up -> ../../../etc/passwd", ("link outside the tree",)),
        "gitcfg": ("gitcfg -> .git/config", ("link outside the tree",)),
        "inside": ("inside -> story.txt", ("link",)),
        "run.sh": ("run.sh", ("mode 100644 -> 100755",)),
        ".github/workflows/ci.yml": (".github/workflows/ci.yml", ("runs on its own",)),
        ".envrc": (".envrc", ("runs on its own",)),
        ".gitattributes": (".gitattributes", ("attributes",)),
        "tools/new.sh": ("tools/new.sh", ("executable",)),
    }
    listed = cli(capsys, "agents", "list")
    assert f"! key -> {key}: link outside the tree" in listed and "! run.sh: mode 100644 -> 100755" in listed
    assert "! .github/workflows/ci.yml: runs on its own" in listed and "9 flagged" in listed
    header = diff_text(ws).split("diff --git", 1)[0]
    assert f"# flagged: key -> {key}: link outside the tree" in header
    assert "# flagged: .envrc: runs on its own" in header and "what Apply lands" in header
    stat = cli(capsys, "agents", "diff", ws.name, "--stat")
    assert "inside -> story.txt  ! link" in stat and "run.sh  ! mode 100644 -> 100755" in stat

    before = sh(repo, "rev-parse", "HEAD")
    with pytest.raises(WorkspaceError, match=r"links that point outside its tree \(gitcfg -> \.git/config, "
                                             rf"key -> {key}, up -> \.\./\.\./\.\./etc/passwd\): nothing was applied"):
        apply(ws)
    assert sh(repo, "rev-parse", "HEAD") == before and not (repo / "key").exists()


@pytest.mark.parametrize("fence", each_fence())
def test_attributes_run_no_driver_and_block_nothing(repo, tmp_path, fence, monkeypatch, capsys):
    marker = tmp_path / "payload-ran"
    ws = hostile(tmp_path, fence, repo, ATTRIBUTES).workspace
    # The user's own config defines the drivers the agent's attributes name (as git-lfs defines its filter).
    config = tmp_path / "user.gitconfig"
    run = payload(marker)
    config.write_text(f'[filter "evil"]\n\tclean = {run}\n\tsmudge = {run}\n\tprocess = {run}\n'
                      f'[diff "evil"]\n\ttextconv = {run}\n\tcommand = {run}\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))

    found = {c.path: (c.added, c.removed) for c in changes(ws).files}
    assert found == {".gitattributes": (2, 0), "notes.txt": (1, 0), "story.txt": (1, 0)}
    text = diff_text(ws)
    assert "+café $Id$" in text and "+the agent's line" in text  # its bytes: no encoding, no ident, no filter
    assert "3 files +4 -0, 1 flagged" in cli(capsys, "agents", "list")
    assert not marker.exists()

    assert apply(ws).how == "fast-forward"
    assert not marker.exists()
    assert sh(repo, "cat-file", "blob", "HEAD:notes.txt") == "café $Id$"  # landed byte for byte
    assert "the agent's line" in (repo / "story.txt").read_text()
