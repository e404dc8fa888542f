"""The engine thread's outputs onto one event loop: one wake-up per step, however many requests it fed.

An OutputRouter subscribes to an EngineThread. After every step, on the engine thread, it picks the
outputs of the requests it routes and hands them all to its loop in one `call_soon_threadsafe`;
there, on the loop, each goes to its RequestHandle. So a step that feeds 64 streams costs one
self-pipe write and no locks, where a wake-up per request per token used to.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from swarm_panel.runtime.core.request import Request, RequestOutput
from swarm_panel.runtime.serving.engine_core import EngineThread


class OutputReader(Protocol):
    """A request's reader on the loop (app.endpoint.streaming.RequestHandle)."""

    request_id: int

    def push(self, output: RequestOutput) -> None: ...


class OutputRouter:
    def __init__(self, engine_thread: EngineThread, loop: asyncio.AbstractEventLoop) -> None:
        self.engine_thread = engine_thread
        self.loop = loop
        # Written on the loop only; the engine thread reads membership (a dict lookup, safe under the GIL).
        self._readers: dict[int, OutputReader] = {}
        self._unsubscribe = engine_thread.subscribe(self._on_step)

    @property
    def usable(self) -> bool:
        return self.engine_thread.alive and not self.loop.is_closed()

    def add(self, reader: OutputReader) -> None:
        """Routes the request's outputs to reader from now on (call before submitting it)."""
        self._readers[reader.request_id] = reader

    def discard(self, request_id: int) -> None:
        self._readers.pop(request_id, None)

    def close(self) -> None:
        self._unsubscribe()
        self._readers.clear()

    # -- engine thread ---------------------------------------------------------------------------

    def _on_step(self, outputs: Sequence[tuple[Request, RequestOutput]]) -> None:
        readers = self._readers
        mine = [output for _, output in outputs if output.request_id in readers]
        if not mine:
            return
        try:
            self.loop.call_soon_threadsafe(self._route, mine)
        except RuntimeError:  # the loop has closed: nobody is listening any more
            pass

    # -- event loop ------------------------------------------------------------------------------

    def _route(self, outputs: list[RequestOutput]) -> None:
        for output in outputs:
            reader = self._readers.pop(output.request_id, None) if output.finished else \
                self._readers.get(output.request_id)
            if reader is not None:
                reader.push(output)
