"""What a fenced launch may write and what it must still read, the fence chosen, and the paths a launch
needs from under the folders a fence hides (the user's home and /tmp)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

BWRAP, LANDLOCK, NONE = "bubblewrap", "landlock", "none"
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"


@dataclass(frozen=True, slots=True)
class Fence:
    """Which fence runs launches, and why there is none when there is none."""

    kind: str  # BWRAP, LANDLOCK or NONE
    executable: str | None = None  # bwrap's path; Landlock: unused
    reason: str = ""  # why NONE: what was missing or what the probes said

    @property
    def available(self) -> bool:
        return self.kind != NONE

    def describe(self) -> str:
        if self.kind == BWRAP:
            return f"bubblewrap ({self.executable}): each agent writes only its worktree, its config home and /tmp"
        if self.kind == LANDLOCK:
            return "Landlock (the kernel's): each agent writes only its worktree, its config home and its own temp folder"
        return f"no fence: {self.reason}"


@dataclass(frozen=True, slots=True)
class Walls:
    """What one launch may write (each host folder and where the harness sees it), what it must still read
    where the fence hides the home and /tmp, what inside a writable folder stays read-only (bubblewrap
    only: Landlock cannot take back a right inside a folder it granted), and the temp folder a fence
    without a /tmp of its own gives as TMPDIR."""

    writable: tuple[tuple[Path, Path], ...]
    readable: tuple[Path, ...] = field(default=())
    sealed: tuple[tuple[Path, Path], ...] = field(default=())
    tmp: Path | None = None


def hidden_folders(home: Path | None) -> list[Path]:
    """What a fence hides: the user's home (keys, shell history, other projects) and the host's /tmp."""
    home = Path(home or Path.home()).resolve()
    return [p for p in (home, Path("/tmp")) if p != Path("/")]


def reexposed(argv: list[str], walls: Walls, hidden: list[Path]) -> list[Path]:
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
