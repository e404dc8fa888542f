"""Apply for a copy: the snapshot's changed files written back into the user's folder, all or nothing.

Refused, with the files named, where the folder's file is no longer what the agent started from, where a
file would be written through a link out of the folder, or where a submodule changed (a folder has no
submodules). Every new file (or link) is made beside its place first, then all are moved into place.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from swarm_panel.app.workspace.changes import FileChange
from swarm_panel.app.workspace.flags import EXECUTABLE, GITLINK, LINK
from swarm_panel.app.workspace.git import WorkspaceError
from swarm_panel.app.workspace.reader import run
from swarm_panel.app.workspace.records import Workspace

SHOWN_FILES = 8


def names(paths: list[str]) -> str:
    return ", ".join(paths[:SHOWN_FILES]) + (f" and {len(paths) - SHOWN_FILES} more" if len(paths) > SHOWN_FILES
                                             else "")


def write_back(ws: Workspace, files: tuple[FileChange, ...]) -> tuple[str, ...]:
    """Writes the changed files into the folder it copied; returns their paths."""
    folder = Path(ws.source)
    if not folder.is_dir():
        raise WorkspaceError(f"agent {ws.name}'s folder {folder} is gone")
    submodules = [f.path for f in files if GITLINK in (f.old_mode, f.new_mode)]
    if submodules:
        raise WorkspaceError(f"agent {ws.name} changed the submodules {names(submodules)}, which cannot be written "
                             f"into a folder: nothing was applied")
    real = os.path.realpath(folder)
    escaping = [f.path for f in files if os.path.commonpath([real, os.path.realpath((folder / f.path).parent)])
                != real]
    if escaping:
        raise WorkspaceError(f"{names(escaping)} would be written through a link out of {folder}: nothing was "
                             "applied")
    stale = [f.path for f in files if _current(folder / f.path) != _blob(ws, f.old_blob)]
    if stale:
        raise WorkspaceError(f"{names(stale)} changed in {folder} since agent {ws.name} started: nothing was "
                             "applied")
    staged: list[tuple[str, Path]] = []
    try:
        for change in files:
            if change.blob:
                target = folder / change.path
                target.parent.mkdir(parents=True, exist_ok=True)
                staged.append((_stage(ws, change, target), target))
    except OSError as exc:
        for temp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        raise WorkspaceError(f"cannot write agent {ws.name}'s files into {folder} ({exc}): nothing was applied") \
            from exc
    for temp, target in staged:
        os.replace(temp, target)
    for change in files:
        if not change.blob:
            with contextlib.suppress(FileNotFoundError):
                (folder / change.path).unlink()
    return tuple(f.path for f in files)


def _stage(ws: Workspace, change: FileChange, target: Path) -> str:
    """The file (or link) as the snapshot holds it, made beside `target` under a temporary name."""
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".swarm-panel")
    if change.new_mode == LINK:
        os.close(fd)
        os.unlink(temp)
        os.symlink(change.link or "", temp)
        return temp
    with os.fdopen(fd, "wb") as handle:
        handle.write(_blob(ws, change.blob) or b"")
    try:
        mode = os.lstat(target).st_mode & 0o777 if not target.is_symlink() else 0o644
    except FileNotFoundError:
        mode = 0o644
    os.chmod(temp, mode | ((mode & 0o444) >> 2) if change.new_mode == EXECUTABLE else mode & ~0o111)
    return temp


def _current(path: Path) -> bytes | None:
    """The folder's file as git would hold it: a link's target, a file's bytes; None where there is neither."""
    try:
        if path.is_symlink():
            return os.fsencode(os.readlink(path))
        return path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def _blob(ws: Workspace, blob: str) -> bytes | None:
    return run(ws, "cat-file", "blob", blob, text=False).stdout if blob else None
