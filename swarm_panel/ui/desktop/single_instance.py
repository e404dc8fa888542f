"""One panel per user and settings file (the panel's memory: Qt's own file, or --settings-file).

The first panel holds a lock file and listens on a local socket, both named after the user and that file, in the
user's runtime folder. A later launch finds the lock held, asks the holder over the socket to raise its window, and
exits. A lock left by a crash names a process that is gone: Qt's QLockFile takes it over, and the socket file the
crashed panel left is removed before listening again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6 import QtCore, QtNetwork

log = logging.getLogger(__name__)

RAISE = b"raise\n"
ANSWER_MS = 3000
# A panel that holds the lock listens moments later: a launch in between asks again for this long.
STARTING_MS = 5000
SOCKET_PATH_BYTES = 104  # the shortest sun_path among the systems (macOS, BSD); Linux's is 108


@dataclass(frozen=True)
class Running:
    """The panel already running, as it answered: its pid and its endpoint."""

    pid: int
    url: str


def _folder() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime) and os.path.isdir(runtime) and os.access(runtime, os.W_OK):
        return Path(runtime)
    return Path(tempfile.gettempdir())


def instance_name(settings_file: str) -> str:
    user = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    digest = hashlib.sha256(os.path.realpath(settings_file).encode()).hexdigest()[:16]
    return f"swarm-panel-{user}-{digest}"


class Instance(QtCore.QObject):
    """The running panel's claim: the lock it holds and the socket later launches ask."""

    raise_requested = QtCore.Signal()

    def __init__(self, lock: QtCore.QLockFile, server: QtNetwork.QLocalServer | None) -> None:
        super().__init__()
        self._lock = lock
        self.server = server
        self.answer: Callable[[], str] = lambda: ""  # the endpoint told to a later launch
        if server is not None:
            server.newConnection.connect(self._accept)

    def _accept(self) -> None:
        while (peer := self.server.nextPendingConnection()) is not None:
            peer.readyRead.connect(lambda peer=peer: self._read(peer))
            peer.disconnected.connect(peer.deleteLater)

    def _read(self, peer: QtNetwork.QLocalSocket) -> None:
        if not peer.canReadLine():
            return
        if bytes(peer.readLine()) == RAISE:
            log.info("a second launch asked for the window")
            peer.write(f"{os.getpid()} {self.answer()}\n".encode())
            peer.flush()
            self.raise_requested.emit()
        peer.disconnectFromServer()

    def release(self) -> None:
        if self.server is not None:
            self.server.close()
        self._lock.unlock()


def _ask(name: str, wait_ms: int) -> Running | None:
    """Asks the panel listening on `name` to raise its window; None if none answers within `wait_ms`."""
    timer = QtCore.QElapsedTimer()
    timer.start()
    while True:
        socket = QtNetwork.QLocalSocket()
        socket.connectToServer(name)
        if socket.waitForConnected(min(ANSWER_MS, max(wait_ms, 1))):
            socket.write(RAISE)
            socket.waitForBytesWritten(ANSWER_MS)
            reply = b""
            while not reply.endswith(b"\n") and socket.waitForReadyRead(ANSWER_MS):
                reply += bytes(socket.readAll())
            socket.abort()
            pid, _, url = reply.decode(errors="replace").strip().partition(" ")
            return Running(int(pid) if pid.isdigit() else 0, url)
        if timer.elapsed() >= wait_ms:
            return None
        QtCore.QThread.msleep(100)


def claim(settings_file: str, starting_ms: int = STARTING_MS) -> Instance | Running:
    """This process's claim to be the panel for `settings_file`, or the panel that already is.

    Raises RuntimeError when another process holds the lock but does not answer within `starting_ms` (it is
    starting, or hung)."""
    name = instance_name(settings_file)
    folder = _folder()
    lock = QtCore.QLockFile(str(folder / f"{name}.lock"))
    lock.setStaleLockTime(0)  # stale only when its process is gone, however long it has run
    address = str(folder / f"{name}.socket")
    if len(address.encode()) >= SOCKET_PATH_BYTES:
        address = name  # Qt puts it in the temp folder: a deep runtime folder would not fit a socket's address
    if not lock.tryLock(0):
        if lock.error() != QtCore.QLockFile.LockError.LockFailedError:
            raise RuntimeError(f"cannot take the lock {folder / name}.lock: {lock.error().name}")
        running = _ask(address, starting_ms)
        if running is not None:
            return running
        pid = lock.getLockInfo()[-3]  # (pid, hostname, application), after a success flag in older bindings
        raise RuntimeError(f"another swarm-panel (pid {pid}) holds {folder / name}.lock but does not answer; "
                           "--new-instance starts a second panel anyway")
    QtNetwork.QLocalServer.removeServer(address)  # a crashed panel's socket file: nobody listens on it
    server = QtNetwork.QLocalServer()
    server.setSocketOptions(QtNetwork.QLocalServer.SocketOption.UserAccessOption)
    if not server.listen(address):
        log.warning("a second launch cannot reach this panel (%s): %s", address, server.errorString())
        server = None
    return Instance(lock, server)
