"""Attack: type a command into a host terminal (TIOCSTI). The test opens a pty as a host shell's terminal
would be; the stand-in opens its slave and pushes "id" and a newline into its input. The host sees nothing
typed, and the fence refused the open (the terminal is not there, or not granted)."""

from __future__ import annotations

import fcntl
import os
import pty
import termios
from pathlib import Path

import pytest

from tests.app.hostile.harness import seen
from tests.app.hostile.host import launch

LEGACY_TIOCSTI = Path("/proc/sys/dev/tty/legacy_tiocsti")
TYPE_INTO = """
    import errno, fcntl, termios
    try:
        fd = os.open({path!r}, os.O_RDWR | os.O_NOCTTY)
    except OSError as exc:
        seen["open"] = errno.errorcode[exc.errno]
    else:
        try:
            for byte in b"id\\n":
                fcntl.ioctl(fd, termios.TIOCSTI, bytes([byte]))
            seen["typed"] = True
        except OSError as exc:
            seen["ioctl"] = errno.errorcode[exc.errno]
"""


def test_a_host_terminal_cannot_be_typed_into(under, fake_home, tmp_path):
    master, slave = pty.openpty()
    try:
        os.set_blocking(slave, False)
        said = seen(launch(under.fence, TYPE_INTO.format(path=os.ttyname(slave)), tmp_path))
        with pytest.raises(BlockingIOError):
            os.read(slave, 64)  # nothing arrived as the terminal's input
    finally:
        os.close(master)
        os.close(slave)
    # Its own /dev (bubblewrap) or devpts (Landlock's namespaces) has no such terminal; else it is not granted.
    assert said == {"open": "ENOENT" if under.namespaced else "EACCES"}


@pytest.mark.skipif(os.geteuid() != 0, reason="TIOCSTI into a terminal not one's own needs CAP_SYS_ADMIN")
@pytest.mark.skipif(not LEGACY_TIOCSTI.exists() or LEGACY_TIOCSTI.read_text().strip() != "1",
                    reason="this kernel refuses TIOCSTI to everyone (dev.tty.legacy_tiocsti = 0)")
def test_on_this_kernel_an_unfenced_root_types_into_it():
    """The attack is real here: without a fence the typed line arrives, so the test above means something."""
    master, slave = pty.openpty()
    try:
        fd = os.open(os.ttyname(slave), os.O_RDWR | os.O_NOCTTY)
        for byte in b"id\n":
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([byte]))
        os.close(fd)
        assert os.read(slave, 64) == b"id\n"
    finally:
        os.close(master)
        os.close(slave)
