"""Landing an agent's work (apply) or dropping it (discard); all or nothing.

Apply lands the agent's snapshot (app.workspace.snapshot), the commit review showed, never its live tree:
it is refused while the agent runs, before a snapshot was taken, once its tree moved on from the snapshot,
and where a link in it points outside the tree. Then:
- a worktree: the snapshot is merged into the user's current branch (a fast-forward, else a merge commit).
  It is tried first with `git merge-tree --write-tree`, which touches no tree: a conflict is refused with
  the files named, and so is a merge that would overwrite the user's uncommitted changes. `git merge` runs
  only after both checks pass, with the filter drivers that only the agent's .gitattributes name turned
  off, and is aborted should it fail all the same;
- a copy: its files are written back into the folder (app.workspace.copy_back).
"""

from __future__ import annotations

import logging
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from swarm_panel.app.workspace.changes import compare
from swarm_panel.app.workspace.copy_back import names, write_back
from swarm_panel.app.workspace.flags import OUTSIDE
from swarm_panel.app.workspace.git import WorkspaceError, changed_paths, git, ok, out
from swarm_panel.app.workspace.records import COPY, Workspace, save
from swarm_panel.app.workspace.snapshot import view

log = logging.getLogger(__name__)

FILTER = re.compile(r"(?:^|\s)filter=(\S+)")


@dataclass(frozen=True, slots=True)
class Applied:
    commit: str  # the user's branch's new tip (COPY: the snapshot whose files were written)
    how: str  # "fast-forward", "merge commit" or "files written"
    files: tuple[str, ...]


def _can_land(ws: Workspace) -> str:
    """The snapshot to land, or WorkspaceError saying why there is none to."""
    if ws.applied:
        raise WorkspaceError(f"agent {ws.name} was already applied to {ws.applied_to} as {ws.applied[:12]}; "
                             "discard it when you are done with it")
    if ws.running():
        raise WorkspaceError(f"agent {ws.name} is still running (pid {ws.pid}): stop it first, then apply")
    if not ws.tree.is_dir():
        raise WorkspaceError(f"agent {ws.name}'s worktree {ws.tree} is gone: nothing to apply; discard it")
    if ws.snapshot is None:
        raise WorkspaceError(f"agent {ws.name} ended with no snapshot of its tree taken: review it first "
                             f"(`swarm-panel agents diff {ws.name}`, or select it in the Review dock), which "
                             "takes one, then apply")
    if view(ws).moved_on:
        raise WorkspaceError(f"agent {ws.name}'s tree changed after its snapshot was taken when it ended (a "
                             "process it left behind?): nothing was applied. What you reviewed is kept as "
                             f"{ws.snapshot[:12]} on its branch {ws.branch}; discard it (`swarm-panel agents "
                             f"discard {ws.name}`)")
    return ws.snapshot


def apply(ws: Workspace) -> Applied:
    """Lands the agent's snapshot in the user's branch or folder; WorkspaceError, with nothing changed, if not."""
    snapshot = _can_land(ws)
    files = compare(ws, snapshot)
    if not files:
        raise WorkspaceError(f"agent {ws.name} changed nothing: nothing to apply")
    outside = [f.shown() for f in files if OUTSIDE in f.flags]
    if outside:
        raise WorkspaceError(f"agent {ws.name} made links that point outside its tree ({names(outside)}): nothing "
                             f"was applied; discard it, or take what you want from its branch {ws.branch} by hand")
    if ws.mode == COPY:
        done = Applied(snapshot, "files written", write_back(ws, files))
    else:
        done = _merge(ws, snapshot)
    ws.applied, ws.applied_to = done.commit, ws.target
    save(ws)
    log.info("agent %s applied to %s (%s): %s", ws.name, ws.target, done.how, done.commit[:12])
    return done


def _merge(ws: Workspace, tip: str) -> Applied:
    repo = Path(ws.source)
    if not repo.is_dir():
        raise WorkspaceError(f"agent {ws.name}'s repository {repo} is gone")
    current = git(repo, "symbolic-ref", "-q", "--short", "HEAD", check=False)
    if current.returncode != 0:
        raise WorkspaceError(f"{repo} has a detached HEAD: check out the branch to apply agent {ws.name} to")
    branch = current.stdout.strip()
    if ok(repo, "merge-base", "--is-ancestor", tip, "HEAD"):
        raise WorkspaceError(f"agent {ws.name}'s branch {ws.branch} is already in {branch}: nothing to apply")
    trial = git(repo, "merge-tree", "--write-tree", "--name-only", "--no-messages", "HEAD", tip, check=False)
    lines = trial.stdout.splitlines()
    if trial.returncode == 1:
        raise WorkspaceError(f"agent {ws.name} conflicts with {branch} in {names(lines[1:])}: nothing was "
                             f"applied; its branch {ws.branch} is kept")
    if trial.returncode != 0 or not lines:
        raise WorkspaceError(f"cannot try the merge of {ws.branch} into {branch}: {trial.stderr.strip()}")
    touched = set(out(repo, "diff", "--name-only", "-z", "HEAD", lines[0]).split("\0")) - {""}
    dirty = set(changed_paths(repo, untracked=True))
    clash = sorted(touched & dirty)
    if clash:
        raise WorkspaceError(f"you have uncommitted changes to {names(clash)} in {repo}, which agent {ws.name}'s "
                             "changes would overwrite: commit or stash them, then apply")
    merged = git(repo, "merge", "--no-edit", "--no-verify", "--no-stat", "-m", f"Merge agent {ws.name} "
                 f"({ws.branch})", tip, check=False, env=_filters_off(_filters(repo, tip) - _filters(repo, "HEAD")))
    if merged.returncode != 0:
        if ok(repo, "rev-parse", "-q", "--verify", "MERGE_HEAD"):
            git(repo, "merge", "--abort", check=False)
        raise WorkspaceError(f"git merge of {ws.branch} into {branch} failed and was undone: "
                             f"{(merged.stderr or merged.stdout).strip()}")
    head = out(repo, "rev-parse", "HEAD")
    ws.target = branch
    return Applied(head, "fast-forward" if head == tip else "merge commit", tuple(sorted(touched)))


def _filters(repo: Path, rev: str) -> set[str]:
    """The filter drivers the .gitattributes files of `rev` name (read as data)."""
    paths = out(repo, "ls-tree", "-r", "-z", "--name-only", rev).split("\0")
    found: set[str] = set()
    for path in paths:
        if path == ".gitattributes" or path.endswith("/.gitattributes"):
            text = git(repo, "cat-file", "blob", f"{rev}:{path}", text=False).stdout.decode(errors="replace")
            found |= set(FILTER.findall(text))
    return found


def _filters_off(drivers: set[str]) -> dict[str, str]:
    """Config (as GIT_CONFIG_* variables: a driver's name may hold any character) that stops each driver:
    the user's own config may define one of the name, and the agent must not make git run it."""
    if not drivers:
        return {}
    settings = [(f"filter.{name}.{key}", value) for name in sorted(drivers)
                for key, value in (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false"))]
    env = {"GIT_CONFIG_COUNT": str(len(settings))}
    for n, (key, value) in enumerate(settings):
        env |= {f"GIT_CONFIG_KEY_{n}": key, f"GIT_CONFIG_VALUE_{n}": value}
    return env


def discard(ws: Workspace) -> None:
    """Removes the agent's worktree, its branch and its record; refused while its harness runs.

    The tree is removed as files, never through `git worktree remove`, which would read the tree's `.git`;
    `git worktree prune` then drops the worktree's entry, its tree being gone."""
    if ws.running():
        raise WorkspaceError(f"agent {ws.name} is still running (pid {ws.pid}): stop it first, then discard")
    shutil.rmtree(ws.tree, ignore_errors=True)
    repo = Path(ws.source)
    if ws.mode != COPY and repo.is_dir():
        git(repo, "worktree", "prune", check=False)
        if ok(repo, "show-ref", "--verify", "-q", f"refs/heads/{ws.branch}"):
            git(repo, "branch", "-D", ws.branch)
    shutil.rmtree(ws.home, ignore_errors=True)
    if ws.home.exists():
        raise WorkspaceError(f"cannot remove {ws.home}: remove it by hand")
    log.info("agent %s discarded", ws.name)
