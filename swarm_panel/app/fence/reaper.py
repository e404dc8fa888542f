"""Every process a harness started ends with it: the fence's top process adopts the orphans below it
(a double fork, a `setsid` daemon), waits for its child, then kills whatever is left and exits only once
nothing below it lives, with its child's exit status. The launcher's Stop is forwarded to the child; its
kill (`kill_tree`) reaches every process below the top one before the top one itself.

Used by landlock_exec: at the top of every fenced launch (above bwrap too: bwrap exits when the harness
does, while its pid 1 may still be killing the rest), and as pid 1 of Landlock's own pid namespace.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

from swarm_panel.app.fence.lockdown import adopt_orphans

FORWARDED = (signal.SIGTERM, signal.SIGINT)
# Sent by the kernel when the launcher (the panel, the CLI) is gone: end everything now.
LAUNCHER_GONE = signal.SIGHUP
KILL_SETTLE_S = 0.01  # between scans while killed processes are being torn down


def processes() -> dict[int, tuple[int, str]]:
    """Every process /proc lists: pid -> (parent pid, state letter); none without a /proc (not Linux)."""
    found: dict[int, tuple[int, str]] = {}
    if not Path("/proc").is_dir():
        return found
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it ended while we looked
            continue
        fields = stat.rsplit(")", 1)[1].split()
        found[int(entry.name)] = (int(fields[1]), fields[0])
    return found


def descendants(root: int) -> list[int]:
    """The live processes below `root` (zombies left out: they are dead, waiting to be reaped)."""
    table = processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    below, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        below.append(pid)
        todo += children.get(pid, [])
    return [pid for pid in below if table.get(pid, (0, "Z"))[1] != "Z"]


def kill_descendants(root: int, *, reap: bool = False) -> None:
    """SIGKILL to every process below `root` until none lives: a process forked while the others were
    being killed is found by the next scan. `reap`: `root` is this process, which waits for its children."""
    while True:
        below = descendants(root)
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if reap:
            for _ in reap_ready():
                pass
        if not below:
            return
        time.sleep(KILL_SETTLE_S)


def kill_tree(root: int) -> None:
    """Every process below `root`, then `root` itself: the top of a fence, a subreaper, adopts the orphans
    of those killed first, so none escapes it."""
    kill_descendants(root)
    try:
        os.kill(root, signal.SIGKILL)
    except ProcessLookupError:
        pass


def reap_ready() -> Iterator[tuple[int, int]]:
    """Each child of this process that has ended, reaped without waiting: (pid, wait status)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, status


def supervise(child: Callable[[], NoReturn]) -> int:
    """Forks `child` below this process (made a subreaper) and returns its wait status once it and
    everything it started have ended. SIGTERM and SIGINT are passed to it; LAUNCHER_GONE (the kernel's
    parent-death signal, which the caller asks for) kills everything at once."""
    adopt_orphans()
    caught = {*FORWARDED, LAUNCHER_GONE}
    signal.pthread_sigmask(signal.SIG_BLOCK, caught)  # none lost, none acted on, until the child is known
    pid = os.fork()
    if pid == 0:
        for number in caught:
            signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, caught)
        child()
    for number in FORWARDED:
        signal.signal(number, lambda number, _frame: _forward(pid, number))
    signal.signal(LAUNCHER_GONE, lambda *_: _end_now())
    signal.pthread_sigmask(signal.SIG_UNBLOCK, caught)
    status = _wait_for(pid)
    kill_descendants(os.getpid(), reap=True)
    return status


def exit_as(status: int) -> NoReturn:
    """Ends this process as the child whose wait status this is ended: the launcher sees the harness's
    own exit code, or the signal that killed it (pid 1 of a namespace, which no signal of its own can
    kill, exits with 128 + the signal instead, as a shell reports it)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number not in (signal.SIGKILL, signal.SIGSTOP):  # neither can be caught (EINVAL): no handler to undo
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status))


def _wait_for(pid: int) -> int:
    """Waits for `pid`, reaping the orphans that end meanwhile."""
    while True:
        ended, status = os.waitpid(-1, 0)
        if ended == pid:
            return status


def _forward(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass


def _end_now() -> NoReturn:
    kill_descendants(os.getpid(), reap=True)
    os._exit(128 + LAUNCHER_GONE)
