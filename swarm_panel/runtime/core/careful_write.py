"""The one way the program writes a file of its own: atomically, never leaving a temp file behind, and never
letting a full, read-only or forbidden folder stop start-up or a request.

A failed write becomes one warning per folder that names what is lost by not writing ("probe verdicts will not
be remembered"); the program carries on in memory. `unwritable_folders()` and `on_unwritable` let a status bar
say so once. A temp file's name carries its writer's pid, so a later run removes what a killed writer left
(`remove_dead_temps`); a damaged file of ours is moved aside for the user, never deleted (`set_aside`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

# The faults of the user's machine, not of the program: each becomes a warning, never an exception.
MACHINE_FAULTS = {errno.ENOSPC: "the disk is full", errno.EROFS: "the folder is read-only",
                  errno.EACCES: "the folder may not be written", errno.EPERM: "the folder may not be written",
                  errno.EDQUOT: "the disk quota is used up"}

_lock = threading.Lock()
_unwritable: dict[Path, str] = {}
_listeners: list[Callable[[Path, str], None]] = []


class Target:
    """What `atomic_open` yields: `file` to write to (None when the folder cannot be written), and `ok`, True
    once the file replaced its destination. `atomic_path` yields `path` instead: a temp name for a writer that
    takes a file name (llama.cpp's quantizer, gguf's writer), None when the folder cannot be written."""

    def __init__(self, file: IO | None, path: Path | None = None) -> None:
        self.file = file
        self.path = path
        self.ok = False


def unwritable_folders() -> dict[Path, str]:
    """Each folder a write failed in this run, with what was lost by it."""
    with _lock:
        return dict(_unwritable)


def on_unwritable(listener: Callable[[Path, str], None]) -> Callable[[], None]:
    """Calls `listener(folder, message)` the first time a write in a folder fails (from the writing thread);
    returns what stops it."""
    with _lock:
        _listeners.append(listener)

    def stop() -> None:
        with _lock:
            if listener in _listeners:
                _listeners.remove(listener)

    return stop


def describe(exc: OSError) -> str:
    return MACHINE_FAULTS.get(exc.errno, exc.strerror or str(exc))


def report(folder: Path, exc: OSError, lost: str) -> None:
    """One warning per folder naming what is lost, and the listeners told: for a writer of its own (QSettings)."""
    message = f"cannot write in {folder} ({describe(exc)}): {lost}"
    with _lock:
        first = folder not in _unwritable
        _unwritable.setdefault(folder, message)
        listeners = list(_listeners) if first else []
    if first:
        log.warning("%s", message)
    else:
        log.debug("%s", message)
    for listener in listeners:
        try:
            listener(folder, message)
        except Exception:  # a status bar that fails must not fail the write path
            log.exception("an unwritable-folder listener failed")


@contextlib.contextmanager
def atomic_open(path: Path | str, mode: str = "wb", *, lost: str) -> Iterator[Target]:
    """Opens a temp file beside `path`; on a clean exit it replaces `path` at once (os.replace).

    The target's file is None when the folder cannot be written: the caller skips its writing. Any failure, the caller's
    included, removes the temp file; an OSError (a full disk, a read-only or forbidden folder, or another fault of
    the machine's) is reported once per folder with `lost` and swallowed, anything else is re-raised after the
    clean-up.
    """
    path = Path(path)
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # The writer's pid in the name lets a later run tell a dead writer's temp file (`remove_dead_temps`).
        fd, temp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
    except OSError as exc:
        report(folder, exc, lost)
        yield Target(None)
        return
    try:
        with os.fdopen(fd, mode) as handle:
            target = Target(handle)
            yield target
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
        target.ok = True
    except OSError as exc:
        _discard(temp)
        report(folder, exc, lost)
    except BaseException:
        _discard(temp)
        raise
    else:
        with _lock:
            _unwritable.pop(folder, None)


@contextlib.contextmanager
def atomic_path(path: Path | str, *, lost: str) -> Iterator[Target]:
    """As `atomic_open`, for a writer that opens the file itself: the target's `path` is an empty temp file beside
    `path` for the writer to overwrite, moved onto `path` on a clean exit."""
    path = Path(path)
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # Probes the folder as mkstemp would, and reserves a name the writer then replaces.
        fd, temp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
        os.close(fd)
    except OSError as exc:
        report(folder, exc, lost)
        yield Target(None)
        return
    target = Target(None, Path(temp))
    try:
        yield target
        os.replace(temp, path)
        target.ok = True
    except OSError as exc:
        _discard(temp)
        report(folder, exc, lost)
    except BaseException:
        _discard(temp)
        raise
    else:
        with _lock:
            _unwritable.pop(folder, None)


def write_file(path: Path | str, data: bytes | str, *, lost: str) -> bool:
    """Writes `data` to `path` atomically; False (and one warning naming `lost`) when the machine refused."""
    mode = "w" if isinstance(data, str) else "wb"
    with atomic_open(path, mode, lost=lost) as target:
        if target.file is not None:
            target.file.write(data)
    return target.ok


def make_folder(folder: Path | str, *, lost: str) -> bool:
    """Makes `folder` (and its parents); False and one warning when the machine refused."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        report(folder, exc, lost)
        return False
    return True


def set_aside(path: Path | str, why: str) -> Path | None:
    """Moves a damaged file of ours out of the way, kept beside it for the user (`NAME.bad-TIME`), never deleted;
    returns where it went (None where it could not be moved: it is then only ignored). One warning says so."""
    path = Path(path)
    aside = path.with_name(f"{path.name}.bad-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        os.replace(path, aside)
    except OSError as exc:
        log.warning("%s is damaged (%s) and is ignored; it could not be moved aside (%s)", path, why, describe(exc))
        return None
    log.warning("%s is damaged (%s): moved to %s; the defaults are used", path, why, aside.name)
    return aside


def remove_dead_temps(folder: Path | str) -> list[Path]:
    """Removes the temp files in `folder` whose writer is no longer running (a process killed mid-write);
    returns them. A live writer's temp, or one whose writer cannot be told, is left alone."""
    removed = []
    for temp in Path(folder).glob(".*.tmp"):
        pid = temp.name.removesuffix(".tmp").split(".")[-2]
        if pid.isdigit() and not _running(int(pid)):
            _discard(str(temp))
            removed.append(temp)
    return removed


def _running(pid: int) -> bool:
    if os.name != "posix":  # os.kill(pid, 0) would end the process on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # alive, another user's
        return True
    return True


def _discard(temp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(temp)
