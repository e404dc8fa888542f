"""The snapshot: an agent's tree, committed onto its branch by the host when its harness ends.

Review shows the snapshot and Apply lands it, never the live tree: a process the agent left behind may go on
writing there, but what lands is what was reviewed. A tree that no longer matches its snapshot has moved
on: review says so, and Apply refuses it. While the agent runs there is no snapshot, only its live tree,
which review shows as not final.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from swarm_panel.app.workspace.git import AGENT_IDENTITY, WorkspaceError, git, out
from swarm_panel.app.workspace.reader import live_tree, run, safe_args, value
from swarm_panel.app.workspace.records import COPY, Workspace, save

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class View:
    """What review compares with the agent's base."""

    rev: str  # the snapshot commit, or the live tree's object
    final: bool  # the snapshot of an agent that ended; False: its live tree
    moved_on: bool  # its tree no longer holds what the snapshot does

    def note(self, name: str) -> str:
        if self.moved_on:
            return (f"agent {name}'s tree changed after its snapshot was taken when it ended: shown is the "
                    "snapshot, and Apply refuses it")
        if not self.final:
            return f"agent {name}'s live tree, not final: it is still running, or ended with no snapshot taken"
        return f"agent {name}'s snapshot {self.rev[:12]}, taken when it ended: what Apply lands"


def commit(ws: Workspace, tree: str, parents: list[str], message: str) -> str:
    """A commit of `tree` (no hook runs: commit-tree has none) in the workspace's objects."""
    return value(ws, *AGENT_IDENTITY, "commit-tree", tree, *(arg for p in parents for arg in ("-p", p)),
                 "-m", message)


def tip(ws: Workspace) -> str:
    ref = f"refs/heads/{ws.branch}^{{commit}}"
    if ws.mode == COPY:
        return value(ws, "rev-parse", "--verify", ref)
    return out(Path(ws.source), "rev-parse", "--verify", ref)


def move_branch(ws: Workspace, new: str, old: str) -> None:
    """Its branch to `new`, only if it is still at `old` (a copy's branch is in its own git folder)."""
    args = ("update-ref", "-m", f"swarm-panel: snapshot of agent {ws.name}", f"refs/heads/{ws.branch}", new, old)
    if ws.mode == COPY:
        run(ws, *args)
    else:
        git(Path(ws.source), *safe_args(), *args)


def take(ws: Workspace) -> str:
    """Commits its tree onto its branch (the tip itself where nothing changed) and records it."""
    tree = live_tree(ws)
    parent = tip(ws)
    head = parent
    if tree != value(ws, "rev-parse", f"{parent}^{{tree}}"):
        head = commit(ws, tree, [parent], f"agent {ws.name}'s tree when it ended")
        move_branch(ws, head, parent)
    ws.snapshot = head
    save(ws)
    log.info("agent %s: snapshot %s of its tree", ws.name, head[:12])
    return head


def snapshot(ws: Workspace) -> str | None:
    """take(), for the launcher once a harness has ended: a failure is logged, its review then shows the
    live tree as not final and Apply asks for a review first."""
    try:
        return take(ws)
    except (WorkspaceError, OSError) as exc:
        log.warning("agent %s: no snapshot of its tree (%s)", ws.name, exc)
        return None


def view(ws: Workspace, *, take_missing: bool = False) -> View:
    """The snapshot and whether its tree moved on since; the live tree while it runs, or where it ended with
    no snapshot (unless `take_missing`: a review about to be read takes it now)."""
    if ws.running() or (ws.snapshot is None and not take_missing):
        return View(live_tree(ws), final=False, moved_on=False)
    if ws.snapshot is None:
        take(ws)
    assert ws.snapshot is not None
    now = live_tree(ws)
    return View(ws.snapshot, final=True, moved_on=now != value(ws, "rev-parse", f"{ws.snapshot}^{{tree}}"))
