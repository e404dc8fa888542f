"""A real server (the tiny llama model) for hostile stand-ins to attack, a launcher that issues their keys,
and what the host runs beside it that no agent may reach (this module holds no tests itself)."""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from swarm_panel.app.fence.choose import detect
from swarm_panel.app.fence.walls import BWRAP, LANDLOCK
from swarm_panel.app.harness.launcher import HarnessRun, Launcher
from swarm_panel.app.service.engine_service import SwarmService
from tests.app.hostile.harness import attack, hostile_kind
from tests.app.server.test_server_common import running, settings

FENCES = {kind: detect(kind) for kind in (BWRAP, LANDLOCK)}


def each_fence():
    return [pytest.param(fence, id=kind, marks=pytest.mark.skipif(not fence.available, reason=fence.reason))
            for kind, fence in FENCES.items()]


@contextmanager
def served(model_path) -> Iterator:
    service = SwarmService(settings(engine="llama", model=model_path, n_ctx=2048, n_batch=256, num_lanes=4,
                                    threads=2))
    with running(service) as server:
        server.service = service
        yield server


def launch(server, fence, install: Path, state: Path, code: str, *, folder: Path, **launcher_options) -> HarnessRun:
    """The stand-in (its script in `install`) launched in `folder` through the real launcher against `server`,
    `code` its attack; returned once it ended."""
    launcher = Launcher(state_dir=state, fence=fence, keys=server.service.agent_keys, **launcher_options)

    async def scenario():
        [run] = await launcher.start(hostile_kind(install), folder, server.url, attack(code))
        assert await launcher.wait(120)
        return run

    return asyncio.run(scenario())


@contextmanager
def host_service() -> Iterator[int]:
    """A TCP service on the host's 127.0.0.1 that greets whoever connects; yields its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"host secret\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()
        thread.join(5)


@contextmanager
def abstract_socket() -> Iterator[str]:
    """A listening abstract Unix socket of the host; yields its name (without the leading NUL)."""
    name = f"swarm-panel-test-{uuid.uuid4().hex}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen()
    try:
        yield name
    finally:
        listener.close()
