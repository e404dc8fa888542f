"""Attack: outlive the agent. The stand-in starts a `setsid`, double-forked child that sleeps, then writes a
file in its worktree. The host sees, once the run has ended (by itself, by Stop, or with its launcher gone),
no such process, and the file never appears."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid

from tests.app.hostile.harness import attack, hostile_kind
from tests.app.hostile.host import RUN_TIMEOUT_S, URL, launch, processes_naming, user_repo

SLEEP_S = 1


def daemon(marker: str, then: str = "") -> str:
    """Code that leaves a daemon behind (its command line names `marker`), then runs `then`."""
    return f"""
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                os.execvp("sh", ["sh", "-c", "sleep {SLEEP_S}; echo late > late.txt", "{marker}"])
            os._exit(0)
        os.waitpid(pid, 0)
        seen["left"] = "a daemon"
        {then}
    """


def test_what_the_agent_started_ends_with_it(under, fake_home, tmp_path):
    marker = f"hostile-daemon-{uuid.uuid4().hex}"
    run = launch(under.fence, daemon(marker), tmp_path)
    assert run.completed, run.stderr.text
    assert processes_naming(marker) == []
    time.sleep(SLEEP_S + 1)  # past the daemon's sleep: had it lived, its file would be there
    assert not (run.workspace.tree / "late.txt").exists()


def test_what_the_agent_started_ends_with_its_stop(under, fake_home, tmp_path):
    marker = f"hostile-daemon-{uuid.uuid4().hex}"
    code = daemon(marker, then='print("daemon left", flush=True); time.sleep(600)')
    kind, repo = hostile_kind(tmp_path), user_repo(tmp_path / "repo")

    async def scenario():
        from swarm_panel.app.harness.launcher import Launcher

        launcher = Launcher(state_dir=tmp_path / "state", fence=under.fence, grace_s=0.5)
        [run] = await launcher.start(kind, repo, URL, attack(code))
        while "daemon left" not in run.stdout.text:
            assert not run.finished, run.stderr.text
            await asyncio.sleep(0.05)
        await launcher.stop(run.name)
        return run

    run = asyncio.run(scenario())
    assert run.status == "stopped"
    assert processes_naming(marker) == []
    time.sleep(SLEEP_S + 1)
    assert not (run.workspace.tree / "late.txt").exists()


def test_what_the_agent_started_ends_when_its_launcher_is_gone(under, fake_home, tmp_path):
    """The panel killed: the fence's top process ends everything below it (the kernel tells it)."""
    marker = f"hostile-daemon-{uuid.uuid4().hex}"
    tree = tmp_path / "tree"
    tree.mkdir()
    script = tmp_path / "daemon.sh"
    script.write_text(f"setsid sh -c 'sleep {SLEEP_S}; echo late > late.txt' {marker} &\necho started\nsleep 600\n")
    launcher = (
        "import subprocess, sys\n"
        "from pathlib import Path\n"
        "from swarm_panel.app.fence import landlock\n"
        "from swarm_panel.app.fence.choose import wrap\n"
        "from swarm_panel.app.fence.walls import Fence, Walls\n"
        f"landlock.probe_namespaces = lambda: {'' if under.namespaced else 'taken away'!r}\n"
        f"tree = Path({str(tree)!r})\n"
        f"argv = wrap(Fence({under.fence.kind!r}, {under.fence.executable!r}), ['sh', {str(script)!r}],\n"
        "            Walls(((tree, tree),), readable=(Path(" + repr(str(script)) + "),)), tree)\n"
        "p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)\n"
        "print(p.stdout.readline().decode().strip(), flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", launcher], capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          check=True)
    assert done.stdout.strip() == "started", done.stderr
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while processes_naming(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_naming(marker) == []
    time.sleep(SLEEP_S + 1)
    assert not (tree / "late.txt").exists()
