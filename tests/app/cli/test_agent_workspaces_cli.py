"""`swarm-panel agents diff|apply|discard|list` on workspaces a stand-in harness left behind, read from disk as
a later process (the panel or the server having gone) reads them."""

from __future__ import annotations

import asyncio

from swarm_panel.app.cli.main import main
from swarm_panel.app.harness.launcher import Launcher
from swarm_panel.app.workspace.records import all_workspaces
from tests.app.workspace.git_repo import make_repo, sh
from tests.app.workspace.stand_in import stand_in_kind, task


def test_review_then_land_from_the_command_line(tmp_path, capsys):
    repo = make_repo(tmp_path / "repo", {"story.txt": "one\ntwo\n"})

    async def launch():
        launcher = Launcher(state_dir=tmp_path / "state", unconfined=True)
        await launcher.start(stand_in_kind(tmp_path), repo, "http://127.0.0.1:9",
                             task(write={"story.txt": "one\n{name} was here\n"}), n=2)
        assert await launcher.wait(60)

    asyncio.run(launch())
    assert main(["agents", "list"]) == 0
    out = capsys.readouterr().out
    assert "fence: " in out and "agent workspaces kept in" in out
    for name in ("stand-in-1", "stand-in-2"):
        line = next(line for line in out.splitlines() if line.startswith(name))
        assert "kept" in line and "1 file +1 -1" in line and f"swarm-panel/{name} from main" in line

    assert main(["agents", "diff", "stand-in-1"]) == 0
    diff = capsys.readouterr().out
    assert "-two" in diff and "+stand-in-1 was here" in diff and "story.txt" in diff
    assert main(["agents", "diff", "stand-in-1", "--stat"]) == 0
    assert "modified  +1      -1      story.txt" in capsys.readouterr().out

    assert main(["agents", "apply", "stand-in-1"]) == 0
    assert "applied agent stand-in-1 to main (fast-forward" in capsys.readouterr().out
    assert (repo / "story.txt").read_text() == "one\nstand-in-1 was here\n"
    assert main(["agents", "apply", "stand-in-1"]) == 2
    assert "already applied to main" in capsys.readouterr().err
    assert main(["agents", "apply", "stand-in-2"]) == 2
    assert "conflicts with main in story.txt" in capsys.readouterr().err
    assert (repo / "story.txt").read_text() == "one\nstand-in-1 was here\n"
    assert main(["agents", "apply", "nobody"]) == 2
    assert "no agent workspace named 'nobody' (kept: stand-in-1, stand-in-2)" in capsys.readouterr().err

    assert main(["agents", "discard"]) == 2
    assert "name one agent, or --all" in capsys.readouterr().err
    assert main(["agents", "discard", "--all"]) == 0
    assert capsys.readouterr().out.count("discarded agent") == 2
    assert all_workspaces() == [] and sh(repo, "branch", "--list", "swarm-panel/*") == ""
    assert sh(repo, "worktree", "list").count("\n") == 0  # the user's own, alone
