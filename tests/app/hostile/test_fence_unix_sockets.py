"""Attack: reach a host service by its socket file in a folder the agent can read (as /run/docker.sock,
D-Bus's, an ssh-agent's are). The host listens on a stream and a datagram socket under /var/tmp, which no
fence hides; the stand-in sees both files, connects to the one and sends to the other (through a datagram
pair, whose sendto() names any socket file), and reaches for an unfiltered process of the fence's (its
parent's memory) and io_uring (which makes sockets with no system call to check). The seccomp filter
(app.fence.seccomp) refuses each, while what programs use stays: a stream socketpair, TCP, an asyncio loop
running a child through pipes."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import pytest

from tests.app.hostile.harness import seen
from tests.app.hostile.host import launch

VISIBLE = Path("/var/tmp")  # not hidden by either fence, unlike the home and /tmp

REACH = """
    import asyncio, ctypes, errno

    def attempt(name, action):
        try:
            seen[name] = action() or "done"
        except OSError as exc:
            seen[name] = errno.errorcode[exc.errno]

    seen["visible"] = os.path.exists({stream!r}) and os.path.exists({datagram!r})
    attempt("stream", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect({stream!r}))
    attempt("datagram", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0].sendto(b"x", {datagram!r}))

    def pair():
        a, b = socket.socketpair()
        a.sendall(b"ping")
        return b.recv(4).decode()
    attempt("pair", pair)
    attempt("tcp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
    attempt("parent_memory", lambda: open(f"/proc/{{os.getppid()}}/mem", "rb").close())
    attempt("init_memory", lambda: open("/proc/1/mem", "rb").close())
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)
    seen["io_uring"] = "made" if libc.syscall(425, 4, params) >= 0 else errno.errorcode[ctypes.get_errno()]

    async def child():
        process = await asyncio.create_subprocess_exec("echo", "from a child", stdout=asyncio.subprocess.PIPE)
        out, _ = await process.communicate()
        return out.decode().strip()
    seen["asyncio"] = asyncio.run(child())
"""


@pytest.fixture
def listening():
    """A stream and a datagram socket of the host's in a visible folder, each listening."""
    stream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    datagram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    paths = [VISIBLE / f"swarm-panel-hostile-{uuid.uuid4().hex}.sock" for _ in range(2)]
    stream.bind(str(paths[0]))
    stream.listen(4)
    datagram.bind(str(paths[1]))
    for s in (stream, datagram):
        s.setblocking(False)
    yield stream, datagram, paths
    for s in (stream, datagram):
        s.close()
    for path in paths:
        path.unlink()


def test_a_socket_in_a_visible_folder_cannot_be_reached_while_pairs_tcp_and_pipes_work(under, listening, fake_home,
                                                                                      tmp_path):
    stream, datagram, (stream_path, datagram_path) = listening
    said = seen(launch(under.fence, REACH.format(stream=str(stream_path), datagram=str(datagram_path)), tmp_path))
    assert "error" not in said, said
    assert said["visible"] is True  # the files are there to see: only the filter stands between
    # socket(AF_UNIX) and a datagram socketpair refused by the filter, whichever fence.
    assert said["stream"] == "EACCES" and said["datagram"] == "EACCES"
    with pytest.raises(BlockingIOError):
        stream.accept()
    with pytest.raises(BlockingIOError):
        datagram.recv(16)
    # Its parent (the bridge, or landlock_exec) is unfiltered: no process below may trace or read it.
    assert said["parent_memory"] in ("EACCES", "EPERM") and said["init_memory"] in ("EACCES", "EPERM")
    assert said["io_uring"] == "ENOSYS"
    assert said["pair"] == "ping" and said["tcp"] == "done" and said["asyncio"] == "from a child"
