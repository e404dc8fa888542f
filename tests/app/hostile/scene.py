"""The stage for the hostile stand-in's review tests: the fences that work here, a user's repository, one
agent launched through the real launcher, a payload that leaves a marker file wherever it runs, and what the
host's review (list, diff, apply, discard, the panel's survey) does with what the agent left."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from swarm_panel.app.cli.main import main
from swarm_panel.app.fence.choose import detect
from swarm_panel.app.fence.walls import BWRAP, LANDLOCK
from swarm_panel.app.harness.launcher import HarnessRun, Launcher
from tests.app.hostile.harness import attack, hostile_kind, seen

URL = "http://127.0.0.1:9"  # the stand-in sends no request
FENCES = {kind: detect(kind) for kind in (BWRAP, LANDLOCK)}


def each_fence():
    return [pytest.param(fence, id=kind, marks=pytest.mark.skipif(not fence.available, reason=fence.reason))
            for kind, fence in FENCES.items()]


def payload(marker: Path) -> str:
    """A command line git would run through the shell (the `;` makes it one): it leaves `marker`."""
    return f"touch {marker}; false"


def hostile(tmp_path: Path, fence, folder: Path, code: str, **given) -> HarnessRun:
    """The stand-in launched on `folder` in `fence`, running `code` with `P` (the `given` values) in scope;
    returns its run once it has ended, its report checked for the attack's own failure."""
    task = attack(f"P = json.loads({json.dumps(json.dumps(given, default=str))})\n" + code)

    async def scenario():
        launcher = Launcher(state_dir=tmp_path / "state", fence=fence)
        [run] = await launcher.start(hostile_kind(tmp_path), folder, URL, task)
        assert await launcher.wait(60)
        return run

    run = asyncio.run(scenario())
    assert run.completed, run.stderr.text
    report = seen(run)
    assert "error" not in report, report
    return run


def cli(capsys, *argv: str) -> str:
    """`swarm-panel ARGV`'s output (its main function, as the command line runs it); it must succeed."""
    assert main(list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out
