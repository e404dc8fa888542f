"""What an agent changed against its base: files with +/- lines, and the whole diff, committed or not.

Read through a throwaway copy of the worktree's index (GIT_INDEX_FILE), so new files count too and neither
the agent's index nor its tree is touched; only the changed files are hashed, the copy knows the rest.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from swarm_panel.app.workspace.git import AGENT_IDENTITY, WorkspaceError, git, out
from swarm_panel.app.workspace.records import Workspace

STATUS_WORDS = {"A": "added", "D": "deleted", "M": "modified", "T": "type changed"}


@dataclass(frozen=True, slots=True)
class FileChange:
    path: str
    status: str  # added, deleted, modified
    added: int | None  # lines; None for a binary file
    removed: int | None


@dataclass(frozen=True, slots=True)
class Changes:
    files: tuple[FileChange, ...]

    @property
    def added(self) -> int:
        return sum(f.added or 0 for f in self.files)

    @property
    def removed(self) -> int:
        return sum(f.removed or 0 for f in self.files)

    def summary(self) -> str:
        return f"{len(self.files)} file{'s' * (len(self.files) != 1)} +{self.added} -{self.removed}"


@contextlib.contextmanager
def _staged_copy(ws: Workspace) -> Iterator[dict[str, str]]:
    """An index holding the worktree as it is now, in a temp file of ours: GIT_INDEX_FILE for git."""
    tree = ws.tree
    if not tree.is_dir():
        raise WorkspaceError(f"agent {ws.name}'s worktree {tree} is gone; discard it (`swarm-panel agents discard "
                             f"{ws.name}`)")
    index = Path(out(tree, "rev-parse", "--path-format=absolute", "--git-path", "index"))
    with tempfile.TemporaryDirectory(prefix="swarm-panel-index-") as scratch:
        copy = os.path.join(scratch, "index")
        if index.exists():
            shutil.copyfile(index, copy)
        env = {"GIT_INDEX_FILE": copy}
        if not index.exists():
            git(tree, "read-tree", ws.base, env=env)
        git(tree, "add", "-A", env=env)
        yield env


def changes(ws: Workspace) -> Changes:
    """Its files changed against its base, with lines added and removed."""
    with _staged_copy(ws) as env:
        numstat = git(ws.tree, "diff", "--cached", "--no-renames", "--numstat", "-z", ws.base, env=env).stdout
        statuses = git(ws.tree, "diff", "--cached", "--no-renames", "--name-status", "-z", ws.base, env=env).stdout
    fields = statuses.split("\0")
    status_of = {fields[i + 1]: STATUS_WORDS.get(fields[i][:1], fields[i]) for i in range(0, len(fields) - 1, 2)}
    files = []
    for entry in numstat.split("\0"):
        if not entry:
            continue
        added, removed, path = entry.split("\t", 2)
        files.append(FileChange(path, status_of.get(path, "modified"), None if added == "-" else int(added),
                                None if removed == "-" else int(removed)))
    return Changes(tuple(files))


def diff_text(ws: Workspace) -> str:
    """The unified diff of everything it changed, as `git diff` prints it."""
    with _staged_copy(ws) as env:
        return git(ws.tree, "diff", "--cached", "--no-renames", "--no-color", "--no-ext-diff", ws.base,
                   env=env).stdout


def commit_changes(ws: Workspace) -> str:
    """Commits what is in its tree onto its branch (as swarm-panel, no hooks); returns the branch's tip."""
    git(ws.tree, "add", "-A")
    if git(ws.tree, "diff", "--cached", "--quiet", check=False).returncode != 0:
        git(ws.tree, *AGENT_IDENTITY, "commit", "--quiet", "--no-verify", "-m", f"agent {ws.name}'s changes")
    return out(ws.tree, "rev-parse", "HEAD")
