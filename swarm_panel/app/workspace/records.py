"""One agent's workspace as kept on disk: `ROOT/NAME/workspace.json` beside its tree `ROOT/NAME/tree` and the
host's own git folder for it, `ROOT/NAME/git` (app.workspace.reader), which no fence lets an agent write.

ROOT is platformdirs' user data folder for swarm-panel, `worktrees/` (SWARM_PANEL_WORKTREES overrides it).
The record is written before the worktree is made and removed after it is gone, so whatever the panel or the
server was doing when it died, `swarm-panel agents list` still finds the workspace.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import platformdirs

from swarm_panel.app.workspace.git import WorkspaceError
from swarm_panel.runtime.core.careful_write import write_file

log = logging.getLogger(__name__)

RECORD = "workspace.json"
TREE = "tree"
GIT = "git"
WORKTREE, COPY = "worktree", "copy"


def default_root() -> Path:
    override = os.environ.get("SWARM_PANEL_WORKTREES")
    return Path(override) if override else platformdirs.user_data_path("swarm-panel") / "worktrees"


@dataclass(slots=True)
class Workspace:
    name: str  # the agent's name: claude-code-1
    source: str  # the user's repository (its top folder), or the folder that was copied
    mode: str  # WORKTREE or COPY
    folder: str  # where the agent works: its tree, or the user's --dir's place in it
    branch: str  # swarm-panel/NAME
    base: str  # the commit it started from
    target: str  # the user's branch it started from (COPY: the folder itself)
    created: float = field(default_factory=time.time)
    pid: int | None = None  # its harness while one runs
    pid_started: str | None = None  # that process's start time, so a reused pid is not taken for it
    applied: str | None = None  # the user's commit it landed as
    applied_to: str | None = None
    # WORKTREE: the user's repository's git folder (its common dir), whose objects its reviews read.
    common: str = ""
    # The commit its tree was when its harness ended, on its branch: what review shows and Apply lands.
    snapshot: str | None = None
    root: str = field(default="", compare=False)  # ROOT, not saved: the record may be read from elsewhere

    @property
    def home(self) -> Path:
        """The record's folder: ROOT/NAME."""
        return Path(self.root) / self.name

    @property
    def tree(self) -> Path:
        return self.home / TREE

    @property
    def git_dir(self) -> Path:
        """The host's git folder for it, beside its tree: the agent can write its tree, never this."""
        return self.home / GIT

    def running(self) -> bool:
        """Its harness is alive: the pid exists and started when the recorded one did."""
        return self.pid is not None and process_start(self.pid) == self.pid_started

    def state(self) -> str:
        """What `agents list` and the panel say of it: running, applied, kept, or tree missing."""
        if self.running():
            return "running"
        if self.applied:
            return "applied"
        return "kept" if self.tree.is_dir() else "tree missing"


def process_start(pid: int) -> str | None:
    """A process's start time as /proc says (field 22), '' where there is no /proc, None if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return ""
        return ""


def save(ws: Workspace) -> bool:
    data = {k: v for k, v in asdict(ws).items() if k != "root"}
    return write_file(ws.home / RECORD, json.dumps(data, indent=2) + "\n",
                      lost=f"agent {ws.name}'s workspace record (its worktree is kept; `agents list` may miss it)")


def load(root: Path, name: str) -> Workspace | None:
    path = root / name / RECORD
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Workspace(**data, root=str(root))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        log.warning("cannot read %s (%s): its folder is kept as it is", path, exc)
        return None


def all_workspaces(root: Path | None = None) -> list[Workspace]:
    root = root or default_root()
    if not root.is_dir():
        return []
    found = [load(root, entry.name) for entry in sorted(root.iterdir()) if entry.is_dir()]
    return sorted((ws for ws in found if ws is not None), key=lambda ws: ws.created)


def find(name: str, root: Path | None = None) -> Workspace:
    ws = load(root or default_root(), name)
    if ws is None:
        kept = ", ".join(w.name for w in all_workspaces(root)) or "none"
        raise WorkspaceError(f"no agent workspace named {name!r} (kept: {kept})")
    return ws
