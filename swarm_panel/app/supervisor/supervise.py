"""Runs `swarm-panel ARGS` as a child and reports a native crash: the child died of a signal nobody sent it."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from swarm_panel.runtime.core.black_box import ENV as BLACK_BOX_ENV
from swarm_panel.runtime.core.black_box import read_black_box

log = logging.getLogger(__name__)

# Set in the child: it runs its command itself instead of supervising again.
CHILD_ENV = "SWARM_PANEL_SUPERVISED"
# Forwarded to the child, which runs in a process group of its own so that a terminal's Ctrl-C reaches it once.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Crash:
    signal: int
    last_step: str  # the llama_decode call in flight, '' where none had run

    @property
    def signal_name(self) -> str:
        try:
            return signal.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"

    def message(self) -> str:
        where = (f"The last step was {self.last_step}." if self.last_step
                 else "No step had run: it died loading or before its first step.")
        oom = " The kernel kills with SIGKILL when memory runs out." if self.signal == signal.SIGKILL else ""
        return (f"The engine crashed ({self.signal_name}) inside native code (llama.cpp or its GPU driver), "
                f"and took the server with it.{oom} {where} The Python stacks above, if any, say where.")


def supervised() -> bool:
    """Whether this process is a supervisor's child."""
    return os.environ.get(CHILD_ENV) == "1"


def own_command(args: list[str]) -> list[str]:
    """The command line that runs `swarm-panel ARGS` in a new process."""
    if getattr(sys, "frozen", False):  # a PyInstaller bundle is its own interpreter and entry point
        return [sys.executable, *args]
    return [sys.executable, "-m", "swarm_panel", *args]


def _die_with_parent() -> None:
    # The child never outlives this process (a supervisor killed with SIGKILL cannot forward anything).
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def run_child(args: list[str], command: list[str] | None = None) -> tuple[int, Crash | None]:
    """Runs the command (default: `swarm-panel ARGS`) to its end; (exit status, the crash where it crashed)."""
    with tempfile.TemporaryDirectory(prefix="swarm-panel-") as folder:
        box = Path(folder) / "black-box"
        env = dict(os.environ, **{CHILD_ENV: "1", BLACK_BOX_ENV: str(box)})
        child = subprocess.Popen(command or own_command(args), env=env, process_group=0,
                                 # The supervisor has no threads yet: preexec_fn is safe here.
                                 preexec_fn=_die_with_parent if sys.platform == "linux" else None)  # noqa: PLW1509
        previous = {sig: signal.signal(sig, lambda number, _frame: child.send_signal(number)) for sig in FORWARDED}
        try:
            while True:
                try:
                    code = child.wait()
                    break
                except KeyboardInterrupt:  # only where SIGINT's handler was replaced under us
                    child.send_signal(signal.SIGINT)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if code >= 0 or -code in FORWARDED:
            return (code if code >= 0 else 128 - code), None
        return 128 - code, Crash(-code, read_black_box(box))


def supervise(args: list[str], on_crash: Callable[[Crash], bool], command: list[str] | None = None) -> int:
    """Runs the child until it ends; after a crash `on_crash` says whether to start it again."""
    while True:
        code, crash = run_child(args, command)
        if crash is None:
            return code
        log.error("%s", crash.message())
        if not on_crash(crash):
            return code
