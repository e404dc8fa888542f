"""The faults of a user's machine, made for a test: a small volume that fills or turns read-only (a real tmpfs
where this machine lets a test mount one), and the same faults injected where it does not."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from swarm_panel.runtime.core import careful_write


class Volume:
    """A tmpfs of `size` mounted on `path`: fill it, or remount it read-only, as a disk does to a running program."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fill(self) -> None:
        """Writes a filler until the volume is full (ENOSPC), as another program filling the disk would."""
        with contextlib.suppress(OSError), open(self.path / "filler", "ab", buffering=0) as f:
            while True:
                f.write(b"\0" * 4096)

    def read_only(self) -> None:
        _mount("-o", "remount,ro", self.path)

    def temp_files(self) -> list[Path]:
        return [p for p in self.path.rglob("*") if p.name.endswith(".tmp")]


def _mount(*args) -> None:
    subprocess.run(["mount", *map(str, args)], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "2m", read_only: bool = False):
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    try:
        _mount("-t", "tmpfs", "-o", options, "tmpfs", path)
    except (OSError, subprocess.CalledProcessError) as exc:
        reason = getattr(exc, "stderr", None) or exc
        pytest.skip(f"this machine does not let a test mount a tmpfs ({str(reason).strip()}); "
                    "the injected faults of test_write_paths.py stand in")
    try:
        yield Volume(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def volume(tmp_path):
    """An empty 2 MB volume."""
    with tmpfs(tmp_path / "volume") as made:
        yield made


@pytest.fixture(autouse=True)
def _fresh_unwritable_folders():
    """Each test sees careful_write's one-warning-per-folder memory as a fresh run would."""
    with careful_write._lock:
        careful_write._unwritable.clear()
    yield
    with careful_write._lock:
        careful_write._unwritable.clear()


class Injected:
    """Makes every careful write under `folder` fail as a machine would: EROFS at once (a read-only folder), or
    ENOSPC on the first flush after the temp file exists (a full disk: the case that used to leave a temp file)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.broken: dict[Path, int] = {}
        real = tempfile.mkstemp

        def mkstemp(*args, dir=None, **kwargs):
            code = self._code(dir)
            if code == errno.EROFS:
                raise OSError(code, os.strerror(code), str(dir))
            fd, name = real(*args, dir=dir, **kwargs)
            if code == errno.ENOSPC:
                os.close(fd)
                fd = os.open("/dev/full", os.O_WRONLY)  # every write there fails with ENOSPC
            return fd, name

        monkeypatch.setattr(careful_write.tempfile, "mkstemp", mkstemp)

    def _code(self, folder) -> int | None:
        if folder is None:
            return None
        folder = Path(folder).resolve()
        for broken, code in self.broken.items():
            if folder == broken or broken in folder.parents:
                return code
        return None

    def full(self, folder: Path) -> Path:
        self.broken[Path(folder).resolve()] = errno.ENOSPC
        return folder

    def read_only(self, folder: Path) -> Path:
        self.broken[Path(folder).resolve()] = errno.EROFS
        return folder


@pytest.fixture
def inject(monkeypatch):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full to stand for a full disk")
    return Injected(monkeypatch)
