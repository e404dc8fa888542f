"""The shape of the step in flight, kept in a file mapped into memory, so that a crash inside native code
(llama.cpp, a GPU driver) still leaves it for whoever reads the file after the process died.

A process under app.supervisor gets the file's path in SWARM_PANEL_BLACK_BOX; without it nothing is kept.
Writing is one slice assignment into the mapping: no system call, no flush, cheap enough for every step.
"""

from __future__ import annotations

import mmap
import os
from functools import cache
from pathlib import Path

ENV = "SWARM_PANEL_BLACK_BOX"
SIZE = 4096


class BlackBox:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        with open(path, "w+b") as file:
            file.truncate(SIZE)
            self._map = mmap.mmap(file.fileno(), SIZE)

    def record(self, text: str) -> None:
        data = text.encode("utf-8", errors="replace")[:SIZE]
        self._map[:SIZE] = data.ljust(SIZE, b"\0")


def read_black_box(path: str | os.PathLike[str]) -> str:
    """What the process last recorded ('' where it recorded nothing)."""
    try:
        return Path(path).read_bytes().rstrip(b"\0").decode("utf-8", errors="replace")
    except OSError:
        return ""


@cache
def black_box() -> BlackBox | None:
    """This process's black box, where its supervisor named one."""
    path = os.environ.get(ENV)
    return BlackBox(path) if path else None
