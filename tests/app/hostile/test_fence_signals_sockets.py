"""Attack: reach a host process by a signal or a socket. The host runs a process and listens on an abstract
Unix socket and on a socket file under /tmp; the stand-in signals the process and connects to both. The
host's process lives on, and neither socket is reached (docs/agents.md); a socket in a folder the agent
sees: test_fence_unix_sockets.py."""

from __future__ import annotations

import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.app.hostile.harness import seen
from tests.app.hostile.host import alive, launch

REACH = """
    import errno, signal
    try:
        os.kill({pid}, signal.SIGKILL)
        seen["signal"] = "sent"
    except OSError as exc:
        seen["signal"] = errno.errorcode[exc.errno]
    for name, address in (("abstract", {abstract!r}), ("named", {named!r})):
        try:
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(address)
            seen[name] = "connected"
        except OSError as exc:
            seen[name] = errno.errorcode[exc.errno]
"""


@pytest.fixture
def host_side(tmp_path):
    process = subprocess.Popen(["sleep", "600"])
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind(f"\0swarm-panel-hostile-{uuid.uuid4().hex}")
    named = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    named_path = Path("/tmp") / f"swarm-panel-hostile-{uuid.uuid4().hex}.sock"
    named.bind(str(named_path))
    for s in (abstract, named):
        s.listen(4)
    yield process, abstract.getsockname(), str(named_path)
    process.kill()
    process.wait()
    abstract.close()
    named.close()
    named_path.unlink()


def attempt(under, host_side, fake_home, tmp_path) -> dict:
    process, abstract, named = host_side
    said = seen(launch(under.fence, REACH.format(pid=process.pid, abstract=abstract, named=named), tmp_path))
    assert alive(process.pid)
    return said


def test_a_host_process_cannot_be_signalled(under, host_side, fake_home, tmp_path):
    said = attempt(under, host_side, fake_home, tmp_path)
    # Not there in its own pid namespace; refused by Landlock's signal scope (ABI 6) where it has none.
    assert said["signal"] == ("ESRCH" if under.namespaced else "EPERM")


def test_an_abstract_socket_of_the_host_cannot_be_reached(under, host_side, fake_home, tmp_path):
    said = attempt(under, host_side, fake_home, tmp_path)
    # The seccomp filter refuses the socket itself, before bubblewrap's network namespace (no such socket
    # there) or Landlock's abstract socket scope (ABI 6) would.
    assert said["abstract"] == "EACCES"


def test_a_socket_under_the_hidden_tmp_cannot_be_reached(under, host_side, fake_home, tmp_path):
    said = attempt(under, host_side, fake_home, tmp_path)
    # Refused by the seccomp filter before the path is looked up: under bubblewrap the file is not even
    # there (its own /tmp), under Landlock it is (ABI 7 does not check connect() on a socket's path).
    assert said["named"] == "EACCES"
