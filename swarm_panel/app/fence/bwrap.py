"""A bubblewrap (bwrap) command line around a harness: it writes only its worktree, its config home and a
private /tmp, reads the rest of the system read-only, and shares the host's network so the endpoint on
127.0.0.1 stays reachable (a network namespace of its own would have no loopback to the server).

Mounts, in order (bwrap applies them in order, later ones on top of earlier ones):
- `/` read-only, a fresh /dev and /proc (its own pid namespace: its children end with it);
- a tmpfs over the user's home (keys, shell history, other projects) and over /tmp, then read-only binds of
  what a launch needs from under them (the harness's install folder, the repository's .git, the folders
  on PATH under the home), then the writable binds: the worktree and the config home.
As root, bwrap keeps its capabilities unless told: `--cap-drop ALL` stops a remount of `/` read-write.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

BWRAP = "bubblewrap"
NONE = "none"
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Fence:
    """Which fence runs launches, and why there is none when there is none."""

    kind: str  # BWRAP or NONE
    executable: str | None = None
    reason: str = ""  # why NONE: what was missing or what the probe said

    @property
    def available(self) -> bool:
        return self.kind != NONE

    def describe(self) -> str:
        if self.available:
            return f"bubblewrap ({self.executable}): each agent writes only its worktree, its config home and /tmp"
        return f"no fence: {self.reason}"


@dataclass(frozen=True, slots=True)
class Walls:
    """What one launch may write (each host folder and where the harness sees it), what it must still read
    where the fence hides the home and /tmp, and what inside a writable folder stays read-only."""

    writable: tuple[tuple[Path, Path], ...]
    readable: tuple[Path, ...] = field(default=())
    sealed: tuple[tuple[Path, Path], ...] = field(default=())


def detect(executable: str | None = None) -> Fence:
    """bwrap on PATH (or the path given) that can build a sandbox here: some kernels and containers refuse
    the namespaces it needs, so it is tried once, not assumed."""
    path = shutil.which(executable or "bwrap")
    if path is None:
        return Fence(NONE, reason=f"bubblewrap (bwrap) is not installed; {INSTALL_HINT}")
    failure = _probe(path)
    if failure:
        return Fence(NONE, reason=f"bubblewrap at {path} cannot build a sandbox here: {failure}")
    return Fence(BWRAP, path)


@functools.lru_cache(maxsize=4)
def _probe(path: str) -> str:
    """'' when a sandbox with this module's options runs `true`; else bwrap's complaint."""
    argv = [path, *_base_options(), "--", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return "" if done.returncode == 0 else (done.stderr.strip() or f"exit code {done.returncode}")


def _base_options() -> list[str]:
    options = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-ipc",
               "--unshare-uts", "--die-with-parent"]
    if os.geteuid() == 0:
        options += ["--cap-drop", "ALL"]
    return options


def wrap(fence: Fence, argv: list[str], walls: Walls, cwd: Path, *, home: Path | None = None) -> list[str]:
    """`argv` run in `cwd` inside the fence (unchanged without one). `home`: the user's own home, to hide."""
    if not fence.available:
        return list(argv)
    home = Path(home or Path.home()).resolve()
    hidden = [p for p in (home, Path("/tmp")) if p != Path("/")]
    options = _base_options()
    for folder in hidden:
        options += ["--tmpfs", str(folder)]
    for path in _reexposed(argv, walls, hidden):
        options += ["--ro-bind", str(path), str(path)]
    for host, seen in walls.writable:
        options += ["--bind", str(host), str(seen)]
    for host, seen in walls.sealed:
        options += ["--ro-bind", str(host), str(seen)]
    # The host's TMPDIR may name a folder the fence keeps read-only.
    return [fence.executable or "bwrap", *options, "--setenv", "TMPDIR", "/tmp", "--chdir", str(cwd), "--", *argv]


def _reexposed(argv: list[str], walls: Walls, hidden: list[Path]) -> list[Path]:
    """What the launch reads from under a hidden folder: its executable's install folder and the PATH's
    folders there, each as the first folder under the hidden one (~/.venvs, ~/.npm-global: a Node or Python
    harness reads its whole install), and the walls' readables exactly (a repository's .git, not its home)."""
    wanted: list[Path] = []
    program = Path(argv[0])
    interpreter = _interpreter(program)
    needed = [program, program.resolve(), *([interpreter, interpreter.resolve()] if interpreter else []),
              *(Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p)]
    for path in needed:
        for folder in hidden:
            top = _top_under(path, folder)
            if top is not None and top.exists() and top not in wanted:
                wanted.append(top)
    for path in walls.readable:
        if any(_top_under(path, folder) for folder in hidden) and path.exists() and path not in wanted:
            wanted.append(path)
    return wanted


def _interpreter(program: Path) -> Path | None:
    """A script's #! interpreter (a venv's python, linked into ~/.pyenv, say), or None."""
    try:
        with program.open("rb") as handle:
            head = handle.readline(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].decode(errors="replace").split()
    return Path(words[0]) if words and words[0].startswith("/") else None


def _top_under(path: Path, folder: Path) -> Path | None:
    try:
        relative = Path(os.path.abspath(path)).relative_to(folder)
    except ValueError:
        return None
    return folder / relative.parts[0] if relative.parts else None
