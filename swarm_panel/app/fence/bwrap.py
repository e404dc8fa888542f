"""A bubblewrap (bwrap) command line around a harness: it writes only its worktree, its config home and a
private /tmp, reads the rest of the system read-only, and with a network plan (app.fence.network) has a
network namespace of its own, the endpoint on 127.0.0.1 carried in by the bridge; without one, the host's.

Mounts, in order (bwrap applies them in order, later ones on top of earlier ones):
- `/` read-only, a fresh /dev (its own /dev/shm and terminals) and /proc (its own pid namespace: its
  children end with it);
- a tmpfs over the user's home (keys, shell history, other projects), over /tmp and over the folders that
  keep every agent's worktree and config home, then read-only binds of what a launch needs from under
  them (the harness's install and interpreter, the repository's .git) and the links that lead there,
  then the writable binds: the worktree and the config home.
As root, bwrap keeps its capabilities unless told: `--cap-drop ALL` stops a remount of `/` read-write.
A new session: no terminal of the host's is its controlling one (TIOCSTI cannot type into it).
The sandbox's pid 1 is the bridge (app.fence.bridge, --as-pid-1), with or without a network plan: it
starts the harness through app.fence.seccomp, so the harness makes no Unix socket (a read-only mount does
not stop a connect() to /run/docker.sock). The bridge is not filtered, as it carries the endpoint in
through Unix sockets (bwrap's --seccomp would filter it too), and it is the only such process there:
bwrap's own pid 1 would be another, its memory open to the harness. It runs below landlock_exec
--supervise-only, which returns only once the sandbox's last process has ended (bwrap exits with its pid
1, while the kernel may still be killing the rest).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from swarm_panel.app.fence import bridge, seccomp
from swarm_panel.app.fence.network import SEEN, NetPlan
from swarm_panel.app.fence.program import exec_prefix
from swarm_panel.app.fence.walls import BWRAP, Walls, hidden_folders, reexposed, symlinks

PROBE_TIMEOUT_S = 10.0


def probe(executable: str | None = None) -> tuple[str | None, str]:
    """(bwrap's path, '') where it can build a sandbox here, else (None, why not): some kernels and
    containers refuse the namespaces it needs, so it is tried once, not assumed."""
    path = shutil.which(executable or "bwrap")
    if path is None:
        return None, "bubblewrap (bwrap) is not installed"
    failure = _try(path)
    if failure:
        return None, f"bubblewrap at {path} cannot build a sandbox here: {failure}"
    return path, ""


@functools.lru_cache(maxsize=4)
def _try(path: str) -> str:
    """'' when a sandbox with this module's options runs `true` through the seccomp filter; else bwrap's
    complaint, or the filter's."""
    argv = [path, *_base_options(), "--", *seccomp.command(["true"])]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return "" if done.returncode == 0 else (done.stderr.strip() or f"exit code {done.returncode}")


def _base_options() -> list[str]:
    options = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--as-pid-1",
               "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session"]
    if os.geteuid() == 0:
        options += ["--cap-drop", "ALL"]
    return options


def command(executable: str, argv: list[str], walls: Walls, cwd: Path, home: Path | None, *,
            net: NetPlan | None = None) -> list[str]:
    """`argv` run in `cwd` (a path as the harness sees it) inside bubblewrap, below the reaper, started by
    the bridge (app.fence.bridge, the sandbox's pid 1) through the seccomp filter. `net`: a network
    namespace of its own, the bridge carrying the plan's ports to their relays."""
    hidden = hidden_folders(home, walls.hidden)
    options = _base_options()
    for folder in hidden:
        options += ["--tmpfs", str(folder)]
    bridged = bridge.command(net.forwards() if net is not None else {}, seccomp.command(argv))
    shown = list(dict.fromkeys([*reexposed(argv, walls, hidden), *reexposed(bridged, Walls(()), hidden)]))
    for path in shown:
        options += ["--ro-bind", str(path), str(path)]
    for link, target in symlinks(argv, hidden):
        if not any(folder in link.parents for folder in shown):  # else the bound folder holds it already
            options += ["--symlink", target, str(link)]
    for host, seen in walls.writable:
        options += ["--bind", str(host), str(seen)]
    for host, seen in walls.sealed:
        options += ["--ro-bind", str(host), str(seen)]
    if net is not None and net.sockets is not None:
        options += ["--unshare-net", "--ro-bind", str(net.sockets), str(SEEN)]
    # The host's TMPDIR may name a folder the fence keeps read-only.
    return [*exec_prefix(), "--supervise-only", "--parent", str(os.getpid()), "--", executable or BWRAP, *options,
            "--setenv", "TMPDIR", "/tmp", "--chdir", str(cwd), "--", *bridged]
