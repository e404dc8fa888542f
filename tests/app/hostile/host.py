"""What the host sees of a hostile launch: the stand-in launched once through the real launcher and fence, and
the processes still alive afterwards."""

from __future__ import annotations

import asyncio
from pathlib import Path

from swarm_panel.app.fence.walls import Fence
from swarm_panel.app.harness.launcher import HarnessRun, Launcher
from tests.app.hostile.harness import attack, hostile_kind
from tests.app.workspace.git_repo import make_repo

URL = "http://127.0.0.1:9"  # the stand-in sends no request
RUN_TIMEOUT_S = 60


def user_repo(folder: Path) -> Path:
    return make_repo(folder, {"hello.py": 'print("hello")\n'})


def launch(fence: Fence, code: str, tmp_path: Path, repo: Path | None = None) -> HarnessRun:
    """The stand-in run once on `repo` (a new one by default) with the attack `code`; returns once it ended."""
    repo = repo or user_repo(tmp_path / "repo")
    kind = hostile_kind(tmp_path)

    async def scenario() -> HarnessRun:
        launcher = Launcher(state_dir=tmp_path / "state", fence=fence)
        [run] = await launcher.start(kind, repo, URL, attack(code))
        assert await launcher.wait(RUN_TIMEOUT_S), "the stand-in did not end"
        return run

    return asyncio.run(scenario())


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def processes_naming(text: str) -> list[int]:
    """Live processes whose command line holds `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
