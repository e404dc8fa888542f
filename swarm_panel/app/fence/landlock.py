"""A Landlock fence, where bubblewrap cannot run (not installed, or a kernel or AppArmor policy that refuses
its namespaces to users, as Ubuntu 24.04's does): the kernel's Landlock (Linux 5.13 and later) confines
the harness and everything it starts, with no namespace and no privilege.

There are no mounts, so nothing is hidden by covering it: the ruleset grants reading beneath every folder
but the user's home and /tmp (walked down from `/`, their siblings granted one by one), then what a launch
needs from under those (as bubblewrap's re-exposed binds), and writing only beneath its worktree, its config
home and a temp folder of its own (TMPDIR). The harness sees its worktree at its real path. Landlock grants
and never takes back, so a folder inside a writable one cannot be made read-only (a copy's .git stays
writable), and `/` itself cannot be listed.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from swarm_panel.app.fence.walls import Walls, hidden_folders, reexposed

# How a frozen app's executable is told to be the ruleset's small program (see packaging/entry.py).
FROZEN_FLAG = "--landlock-exec"
PROBE_TIMEOUT_S = 30.0


def exec_prefix() -> list[str]:
    if getattr(sys, "frozen", False):  # a PyInstaller bundle has no `python -m`
        return [sys.executable, FROZEN_FLAG]
    return [sys.executable, "-m", "swarm_panel.app.fence.landlock_exec"]


@functools.lru_cache(maxsize=1)
def probe() -> str:
    """'' where a Landlock ruleset can be applied here (tried once, running `true` under one); else why not."""
    try:
        import landlock
    except ImportError:
        return "the landlock package is not installed (pip install landlock)"
    try:
        landlock.landlock_abi_version()
    except (OSError, landlock.LandlockError) as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        return f"the kernel has no Landlock: {reason}"
    with tempfile.TemporaryDirectory(prefix="swarm-panel-landlock-") as scratch:
        folder = Path(scratch)
        argv = command(["true"], Walls(((folder, folder),), tmp=folder), folder, None)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"a Landlock ruleset could not be applied: {exc}"
    if done.returncode != 0:
        return f"a Landlock ruleset could not be applied: {done.stderr.strip() or f'exit code {done.returncode}'}"
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


def command(argv: list[str], walls: Walls, cwd: Path, home: Path | None, *, connect: tuple[int, ...] = ()) -> list[str]:
    """`argv` run in `cwd` under a Landlock ruleset: the small program applies it, then becomes the harness.
    This process is to start it: the harness ends when this process does. `connect`: the only TCP ports it
    may connect to (none bound); empty: TCP as the host's."""
    hidden = hidden_folders(home)
    options: list[str] = []
    for path in [*visible_roots(hidden), *reexposed(argv, walls, hidden)]:
        options += ["--read", str(path)]
    for host, _ in walls.writable:
        options += ["--write", str(host)]
    if walls.tmp is not None:
        options += ["--tmp", str(walls.tmp)]
    for port in connect:
        options += ["--connect", str(port)]
    return [*exec_prefix(), *options, "--chdir", str(cwd), "--parent", str(os.getpid()), "--", *argv]
