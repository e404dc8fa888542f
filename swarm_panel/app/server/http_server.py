"""The endpoint on a real socket: uvicorn serving create_app(service) as a task on the running loop.

`HttpServer` runs on whatever asyncio loop is current (asyncio.run for `swarm-panel serve`, qasync in
the desktop app). `ThreadedHttpServer` gives synchronous code (tests, benchmarks) a server on its own
thread and loop. The service's lifecycle stays with the caller: start it before, stop it after.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import sys
import threading
from collections.abc import Iterator

import uvicorn

from swarm_panel.app.server.app import create_app
from swarm_panel.app.server.port_holder import port_holder
from swarm_panel.app.service import panel_key_file
from swarm_panel.app.service.engine_service import SwarmService

GRACEFUL_SHUTDOWN_S = 3.0
# Longer than clients' own idle expiry (httpx: 5 s), so the client always closes an idle connection
# first; with equal timeouts a request can race the server's close and die as a ReadError.
KEEP_ALIVE_S = 75


class PortInUse(RuntimeError):
    """Another program already listens on the address the server was asked to use."""


class _EmbeddedServer(uvicorn.Server):
    # The host program owns signals (Ctrl-C in `serve`, the Qt app's own handling).
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _Front:
    """The ASGI app behind the socket, replaceable between requests without closing the port. While paused, a new
    POST (a generation) waits at the door; reads (models, metrics, health) answer at once."""

    def __init__(self, app) -> None:
        self.app = app
        self.door: asyncio.Event | None = None  # set: open; None: never paused
        self.held = 0

    async def __call__(self, scope, receive, send) -> None:
        if self.door is not None and not self.door.is_set() and scope["type"] == "http" and scope["method"] == "POST":
            self.held += 1
            try:
                await self.door.wait()
            finally:
                self.held -= 1
        await self.app(scope, receive, send)


def _is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def bind_socket(host: str, port: int) -> socket.socket:
    """A bound TCP socket, or PortInUse with a message that says what to do."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if sys.platform == "win32":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_EXCLUSIVEADDRUSE, 1)
        else:
            # Reuse TIME_WAIT addresses after a restart; a live listener still refuses the bind.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EADDRINUSE, getattr(errno, "WSAEADDRINUSE", -1)) or "in use" in str(exc).lower():
            holder = port_holder(port) or "another program"
            raise PortInUse(
                f"port {port} on {host} is already in use by {holder}; stop it or pick another port "
                f"with --port (or SWARM_PANEL_PORT)"
            ) from None
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


class HttpServer:
    def __init__(self, service: SwarmService, host: str | None = None, port: int | None = None) -> None:
        settings = service.settings
        self.service = service
        self.host = host if host is not None else settings.host
        self.port = port if port is not None else settings.port
        if not _is_loopback(self.host) and settings.api_key is None and not settings.insecure_public_without_api_key:
            raise ValueError(
                f"refusing to listen on {self.host} without an API key: anyone on the network could use the "
                f"model. Set --api-key (SWARM_PANEL_API_KEY), or --insecure-public-without-api-key if you mean it"
            )
        self.app = create_app(service)
        self._front = _Front(self.app)
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None
        self._bound_port: int | None = None

    @property
    def url(self) -> str:
        port = self._bound_port if self._bound_port is not None else self.port
        host = f"[{self.host}]" if ":" in self.host else self.host
        if host in ("0.0.0.0", "[::]"):
            host = "127.0.0.1"
        return f"http://{host}:{port}"

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Returns once the socket listens; raises PortInUse if the port is taken."""
        if self.running:
            return
        sock = bind_socket(self.host, self.port)
        self._bound_port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._front, host=self.host, port=self._bound_port, log_config=None, access_log=False, lifespan="off",
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, server_header=False,
            timeout_keep_alive=KEEP_ALIVE_S,
        )
        server = self._server = _EmbeddedServer(config)
        self._task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]), name="swarm-http")
        while not server.started:
            if self._task.done():
                sock.close()
                self._task.result()  # raises what stopped it
                raise RuntimeError(f"the HTTP server on {self.url} stopped while starting")
            await asyncio.sleep(0.005)
        keys = self.service.agent_keys
        if not keys.user_set:  # the user's own --api-key is theirs to hand out, never written down here
            panel_key_file.write(self._bound_port, keys.generated)

    def serve(self, app=None) -> None:
        """From the next request on, answers with `app` (the panel's fleet gateway); None: the service's own.

        Agents keep their base URL across the switch: the port never closes.
        """
        self._front.app = self.app if app is None else app

    def pause(self) -> None:
        """New generation requests wait until resume(); those already admitted go on. Clients see a slow answer,
        not an error, so agents wait instead of failing."""
        if self._front.door is None:
            self._front.door = asyncio.Event()
        self._front.door.clear()

    def resume(self) -> None:
        if self._front.door is not None:
            self._front.door.set()

    @property
    def paused(self) -> bool:
        return self._front.door is not None and not self._front.door.is_set()

    @property
    def held(self) -> int:
        """Requests waiting at the paused door."""
        return self._front.held

    async def stop(self) -> None:
        """Stops accepting, lets open responses finish (a few seconds at most), releases the port."""
        self.resume()  # held requests go in rather than hold the stop up
        server, task = self._server, self._task
        if server is None or task is None:
            return
        server.should_exit = True
        try:
            await task
        finally:
            self._server = self._task = None
            if self._bound_port is not None:
                panel_key_file.remove(self._bound_port)


class ThreadedHttpServer:
    """An HttpServer on a thread of its own with its own loop, for synchronous callers."""

    def __init__(self, service: SwarmService, host: str | None = None, port: int | None = None) -> None:
        self.http = HttpServer(service, host, port)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return self.http.url

    def start(self, timeout: float = 30.0) -> ThreadedHttpServer:
        self._thread = threading.Thread(target=self._run, name="swarm-http-loop", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the HTTP server did not start in time")
        if self._error is not None:
            raise self._error
        return self

    def stop(self, timeout: float = 30.0) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already ended
            asyncio.run_coroutine_threadsafe(self.http.stop(), loop).result(timeout)
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        self._thread = None

    def __enter__(self) -> ThreadedHttpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.http.start())
        except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
