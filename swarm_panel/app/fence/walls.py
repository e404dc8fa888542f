"""What a fenced launch may write and what it must still read, the fence chosen, and the paths a launch
needs from under the folders a fence hides (the user's home, /tmp, the agents' worktrees and homes)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from swarm_panel.app.fence import installs

BWRAP, LANDLOCK, NONE = "bubblewrap", "landlock", "none"
AUTO = "auto"
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"


@dataclass(frozen=True, slots=True)
class Fence:
    """Which fence runs launches, and why there is none when there is none."""

    kind: str  # BWRAP, LANDLOCK or NONE
    executable: str | None = None  # bwrap's path; Landlock: unused
    reason: str = ""  # why NONE: what was missing or what the probes said
    asked: str = AUTO  # what the user asked for: AUTO, BWRAP or LANDLOCK

    @property
    def available(self) -> bool:
        return self.kind != NONE

    def describe(self) -> str:
        if self.kind == BWRAP:
            return (f"bubblewrap ({self.executable}): each agent writes only its worktree, its config home and /tmp, "
                    "and by default reaches only the endpoint")
        if self.kind == LANDLOCK:
            return ("Landlock (the kernel's): each agent writes only its worktree, its config home and its own temp "
                    "folder, and by default reaches only the endpoint")
        return f"no fence: {self.reason}"


@dataclass(frozen=True, slots=True)
class Walls:
    """What one launch may write (each host folder and where the harness sees it), what it must still read
    where the fence hides the home and /tmp, what inside a writable folder stays read-only (bubblewrap
    only: Landlock cannot take back a right inside a folder it granted), the temp folder a fence
    without a /tmp of its own gives as TMPDIR, and the folders hidden beside the home and /tmp (where
    every agent's worktree and config home are kept: only this launch's own are seen)."""

    writable: tuple[tuple[Path, Path], ...]
    readable: tuple[Path, ...] = field(default=())
    sealed: tuple[tuple[Path, Path], ...] = field(default=())
    tmp: Path | None = None
    hidden: tuple[Path, ...] = field(default=())


def hidden_folders(home: Path | None, extra: tuple[Path, ...] = ()) -> list[Path]:
    """What a fence hides: the user's home (keys, shell history, other projects), the host's /tmp, and
    `extra` where it is not inside those already; the home first."""
    home = Path(home or Path.home()).resolve()
    found: list[Path] = []
    for folder in (home, Path("/tmp"), *(Path(os.path.abspath(p)) for p in extra)):
        if folder != Path("/") and folder not in found and not any(h in folder.parents for h in found):
            found.append(folder)
    return found


def reexposed(argv: list[str], walls: Walls, hidden: list[Path]) -> list[Path]:
    """What the launch reads from under a hidden folder (hidden[0]: the home): the harness's install
    (app.fence.installs: its package or environment, its interpreter's, never a PATH entry's top folder)
    and the walls' readables exactly (a repository's .git, not its home). Links are left out: `symlinks`."""
    wanted: list[Path] = []
    for path in [*installs.needed(argv[0], hidden[0]), *walls.readable]:
        if _under(path, hidden) and path.exists() and not path.is_symlink() and path not in wanted:
            wanted.append(path)
    return wanted


def symlinks(argv: list[str], hidden: list[Path]) -> list[tuple[Path, str]]:
    """The links (each with its target) on the way from the harness's name to its install under a hidden
    folder: ~/.npm-global/bin/codex -> ../lib/node_modules/@openai/codex/bin/codex.js. A fence that
    mounts the install in place (bubblewrap) makes each again, so the harness finds itself as installed."""
    links: list[tuple[Path, str]] = []
    for path in installs.needed(argv[0], hidden[0]):
        while path.is_symlink() and _under(path, hidden) and path not in dict(links):
            target = os.readlink(path)
            links.append((path, target))
            path = path.parent / target
    return links


def _under(path: Path, hidden: list[Path]) -> bool:
    absolute = Path(os.path.abspath(path))
    return any(folder == absolute or folder in absolute.parents for folder in hidden)
