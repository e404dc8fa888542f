"""A Landlock fence, where bubblewrap cannot run (not installed, or a kernel or AppArmor policy that refuses
its namespaces to users, as Ubuntu 24.04's does): the kernel's Landlock (Linux 5.13 and later) confines
the harness and everything it starts, with no privilege.

Nothing is hidden by covering it: the ruleset grants reading beneath every folder but the hidden ones (the
user's home, /tmp, /dev, the agents' worktrees and config homes; walked down from `/`, their siblings
granted one by one), then what a launch needs from under those (as bubblewrap's re-exposed binds), and
writing only beneath its worktree, its config home and a temp folder of its own (TMPDIR). The harness sees
its worktree at its real path. Landlock grants and never takes back, so a folder inside a writable one
cannot be made read-only (a copy's .git stays writable), and `/` itself cannot be listed. Where pid and
mount namespaces can be had (as root, or through a user namespace), the launch gets them too
(landlock_exec --namespaces): its own /proc, /dev/shm and terminals, and no process outlives it.
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from pathlib import Path

from swarm_panel.app.fence import landlock_sys
from swarm_panel.app.fence.program import exec_prefix
from swarm_panel.app.fence.walls import Walls, hidden_folders, reexposed

PROBE_TIMEOUT_S = 30.0


def abi() -> int:
    """This kernel's Landlock ABI, 0 where it has none."""
    try:
        return landlock_sys.abi_version()
    except OSError:
        return 0


@functools.lru_cache(maxsize=1)
def probe() -> str:
    """'' where a Landlock ruleset can be applied here (tried once, running `true` under one); else why not."""
    try:
        landlock_sys.abi_version()
    except OSError as exc:
        return f"the kernel has no Landlock: {exc.strerror or exc}"
    return _try(namespaces=False)


@functools.lru_cache(maxsize=1)
def probe_namespaces() -> str:
    """'' where the launch also gets pid and mount namespaces of its own (tried once); else why not."""
    return probe() or _try(namespaces=True)


def _try(*, namespaces: bool) -> str:
    with tempfile.TemporaryDirectory(prefix="swarm-panel-landlock-") as scratch:
        folder = Path(scratch)
        argv = command(["true"], Walls(((folder, folder),), tmp=folder), folder, None, namespaces=namespaces)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the Landlock fence could not be made: {exc}"
    if done.returncode != 0:
        return done.stderr.strip() or f"the Landlock fence exited with code {done.returncode}"
    return ""


def visible_roots(hidden: list[Path]) -> list[Path]:
    """Folders (and files) whose whole content may be read: everything beside the hidden folders and beside
    each folder on the way down to them. Landlock's grants reach beneath a folder, so `/` cannot be granted
    without granting the home; its entries are granted one by one instead."""
    hidden = [Path(h) for h in hidden]
    roots: list[Path] = []

    def walk(folder: Path) -> None:
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            return
        for entry in entries:
            if entry in hidden:
                continue
            if any(entry in h.parents for h in hidden):
                walk(entry)
            else:
                roots.append(entry)

    walk(Path("/"))
    return roots


def command(argv: list[str], walls: Walls, cwd: Path, home: Path | None, *, namespaces: bool | None = None,
            connect: tuple[int, ...] = ()) -> list[str]:
    """`argv` run in `cwd` under a Landlock ruleset: the small program applies it, then starts the harness
    and stays above it. This process is to start it: the harness ends when this process does.
    `namespaces`: None, where this machine gives them (probed once). `connect`: the only TCP ports it may
    connect to (none bound); empty: TCP as the host's."""
    hidden = hidden_folders(home, walls.hidden)
    options: list[str] = []
    # /dev beside the rest: a disk's device is its whole content, the home's too; landlock_exec grants
    # the few devices every program uses.
    for path in [*visible_roots([*hidden, Path("/dev")]), *reexposed(argv, walls, hidden)]:
        options += ["--read", str(path)]
    for host, _ in walls.writable:
        options += ["--write", str(host)]
    if walls.tmp is not None:
        options += ["--tmp", str(walls.tmp)]
    if namespaces is None:
        namespaces = not probe_namespaces()
    if namespaces:
        options.append("--namespaces")
    for port in connect:
        options += ["--connect", str(port)]
    return [*exec_prefix(), *options, "--chdir", str(cwd), "--parent", str(os.getpid()), "--", *argv]
