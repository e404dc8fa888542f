"""The one way the program writes a file of its own: atomically, never leaving a temp file behind, and never
letting a full, read-only or forbidden folder stop start-up or a request.

A failed write becomes one warning per folder that names what is lost by not writing ("probe verdicts will not
be remembered"); the program carries on in memory. `unwritable_folders()` lets a status bar say so once.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import tempfile
import threading
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
    once the file replaced its destination."""

    def __init__(self, file: IO | None) -> None:
        self.file = file
        self.ok = False


def unwritable_folders() -> dict[Path, str]:
    """Each folder a write failed in this run, with what was lost by it."""
    with _lock:
        return dict(_unwritable)


def on_unwritable(listener: Callable[[Path, str], None]) -> None:
    """Calls `listener(folder, message)` the first time a write in a folder fails (from the writing thread)."""
    with _lock:
        _listeners.append(listener)


def describe(exc: OSError) -> str:
    return MACHINE_FAULTS.get(exc.errno, exc.strerror or str(exc))


def _report(folder: Path, exc: OSError, lost: str) -> None:
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
    included, removes the temp file; a machine fault (full disk, read-only, no permission) is reported once
    per folder with `lost` and swallowed, anything else is re-raised after the clean-up.
    """
    path = Path(path)
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        _report(folder, exc, lost)
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
        _report(folder, exc, lost)
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
        _report(folder, exc, lost)
        return False
    return True


def _discard(temp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(temp)
