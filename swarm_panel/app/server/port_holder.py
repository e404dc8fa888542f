"""Which program listens on a TCP port, for the message a taken port gives. Linux only, from /proc: the listening
socket's inode, then the process with that socket open. Another user's process, or another system, gives None.
"""

from __future__ import annotations

import os
from pathlib import Path

LISTEN = "0A"  # the kernel's TCP_LISTEN in /proc/net/tcp
SHOWN_CHARS = 100


def _listening_inodes(port: int, proc: Path) -> set[str]:
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            rows = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def describe(pid: int, proc: Path = Path("/proc")) -> str:
    """`swarm-panel gui (pid 1234)`: its command line, the program by its file name, a script's rather than its
    interpreter's."""
    try:
        words = [w.decode(errors="replace") for w in (proc / str(pid) / "cmdline").read_bytes().split(b"\0") if w]
    except OSError:
        words = []
    if not words:
        return f"pid {pid}"
    program = os.path.basename(words[0])
    if program.startswith("python") and len(words) > 1 and not words[1].startswith("-"):
        words = words[1:]  # a console script: its own name says more than the interpreter's
        program = os.path.basename(words[0])
    line = " ".join([program, *words[1:]])
    if len(line) > SHOWN_CHARS:
        line = line[:SHOWN_CHARS - 1] + "…"
    return f"{line} (pid {pid})"


def port_holder(port: int, proc: Path = Path("/proc")) -> str | None:
    """The program listening on `port`, described; None when it cannot be seen."""
    sockets = {f"socket:[{inode}]" for inode in _listening_inodes(port, proc)}
    if not sockets:
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in sockets for fd in (entry / "fd").iterdir()):
                return describe(int(entry.name), proc)
        except OSError:  # another user's process, or one that just ended
            continue
    return None
