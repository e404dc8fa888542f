"""Landing an agent's work (apply) or dropping it (discard); all or nothing.

Apply commits what is in the agent's tree onto its branch, then:
- a worktree: merges the branch into the user's current branch (a fast-forward, else a merge commit). It is
  tried first with `git merge-tree --write-tree`, which touches no tree: a conflict is refused with the
  files named, and so is a merge that would overwrite the user's uncommitted changes. `git merge` runs only
  after both checks pass, and is aborted should it fail all the same;
- a copy: writes the changed files back into the folder, refused with the files named where the folder's
  file is no longer what the agent started from. Every new file is written beside its place first, then
  all are moved into place.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from swarm_panel.app.workspace.changes import changes, commit_changes
from swarm_panel.app.workspace.git import WorkspaceError, changed_paths, git, ok, out
from swarm_panel.app.workspace.records import COPY, Workspace, save

log = logging.getLogger(__name__)

SHOWN_FILES = 8


@dataclass(frozen=True, slots=True)
class Applied:
    commit: str  # the user's branch's new tip (COPY: the agent's commit whose files were written)
    how: str  # "fast-forward", "merge commit" or "files written"
    files: tuple[str, ...]


def _names(paths: list[str]) -> str:
    return ", ".join(paths[:SHOWN_FILES]) + (f" and {len(paths) - SHOWN_FILES} more" if len(paths) > SHOWN_FILES
                                             else "")


def _can_land(ws: Workspace) -> None:
    if ws.applied:
        raise WorkspaceError(f"agent {ws.name} was already applied to {ws.applied_to} as {ws.applied[:12]}; "
                             "discard it when you are done with it")
    if ws.running():
        raise WorkspaceError(f"agent {ws.name} is still running (pid {ws.pid}): stop it first, then apply")
    if not ws.tree.is_dir():
        raise WorkspaceError(f"agent {ws.name}'s worktree {ws.tree} is gone: nothing to apply; discard it")


def apply(ws: Workspace) -> Applied:
    """Lands the agent's changes in the user's branch or folder; WorkspaceError, with nothing changed, if not."""
    _can_land(ws)
    files = [change.path for change in changes(ws).files]
    if not files and out(ws.tree, "rev-parse", "HEAD") == ws.base:
        raise WorkspaceError(f"agent {ws.name} changed nothing: nothing to apply")
    tip = commit_changes(ws)
    done = _write_back(ws, tip, files) if ws.mode == COPY else _merge(ws, tip)
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
        raise WorkspaceError(f"agent {ws.name} conflicts with {branch} in {_names(lines[1:])}: nothing was "
                             f"applied; its branch {ws.branch} is kept")
    if trial.returncode != 0 or not lines:
        raise WorkspaceError(f"cannot try the merge of {ws.branch} into {branch}: {trial.stderr.strip()}")
    touched = set(out(repo, "diff", "--name-only", "-z", "HEAD", lines[0]).split("\0")) - {""}
    dirty = set(changed_paths(repo, untracked=True))
    clash = sorted(touched & dirty)
    if clash:
        raise WorkspaceError(f"you have uncommitted changes to {_names(clash)} in {repo}, which agent {ws.name}'s "
                             "changes would overwrite: commit or stash them, then apply")
    merged = git(repo, "merge", "--no-edit", "--no-verify", "-m", f"Merge agent {ws.name} ({ws.branch})", tip,
                 check=False)
    if merged.returncode != 0:
        if ok(repo, "rev-parse", "-q", "--verify", "MERGE_HEAD"):
            git(repo, "merge", "--abort", check=False)
        raise WorkspaceError(f"git merge of {ws.branch} into {branch} failed and was undone: "
                             f"{(merged.stderr or merged.stdout).strip()}")
    head = out(repo, "rev-parse", "HEAD")
    ws.target = branch
    return Applied(head, "fast-forward" if head == tip else "merge commit", tuple(sorted(touched)))


def _write_back(ws: Workspace, tip: str, files: list[str]) -> Applied:
    folder = Path(ws.source)
    if not folder.is_dir():
        raise WorkspaceError(f"agent {ws.name}'s folder {folder} is gone")
    stale = [path for path in files if _current(folder / path) != _at(ws.tree, ws.base, path)]
    if stale:
        raise WorkspaceError(f"{_names(stale)} changed in {folder} since agent {ws.name} started: nothing was "
                             "applied")
    staged: list[tuple[str, Path]] = []
    try:
        for path in files:
            data = _at(ws.tree, tip, path)
            if data is None:
                continue
            target = folder / path
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".swarm-panel")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            shutil.copymode(ws.tree / path, temp)
            staged.append((temp, target))
    except OSError as exc:
        for temp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        raise WorkspaceError(f"cannot write agent {ws.name}'s files into {folder} ({exc}): nothing was applied") \
            from exc
    for temp, target in staged:
        os.replace(temp, target)
    for path in files:
        if _at(ws.tree, tip, path) is None:
            with contextlib.suppress(FileNotFoundError):
                (folder / path).unlink()
    return Applied(tip, "files written", tuple(files))


def _current(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def _at(tree: Path, commit: str, path: str) -> bytes | None:
    done = git(tree, "cat-file", "blob", f"{commit}:{path}", check=False, text=False)
    return done.stdout if done.returncode == 0 else None


def discard(ws: Workspace) -> None:
    """Removes the agent's worktree, its branch and its record; refused while its harness runs."""
    if ws.running():
        raise WorkspaceError(f"agent {ws.name} is still running (pid {ws.pid}): stop it first, then discard")
    repo = Path(ws.source)
    if ws.mode != COPY and repo.is_dir():
        if ws.tree.exists():
            git(repo, "worktree", "remove", "--force", "--force", str(ws.tree), check=False)
        git(repo, "worktree", "prune", check=False)
        if ok(repo, "show-ref", "--verify", "-q", f"refs/heads/{ws.branch}"):
            git(repo, "branch", "-D", ws.branch)
    shutil.rmtree(ws.tree, ignore_errors=True)
    shutil.rmtree(ws.home, ignore_errors=True)
    if ws.home.exists():
        raise WorkspaceError(f"cannot remove {ws.home}: remove it by hand")
    log.info("agent %s discarded", ws.name)
