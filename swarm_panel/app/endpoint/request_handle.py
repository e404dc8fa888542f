"""One submitted request's outputs on the event loop.

A request's outputs reach its RequestHandle through endpoint.output_router, which carries every
output of an engine step across the thread boundary in one call. The handle queues them and sets
its event; a consumer that falls behind takes several outputs in one go.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

from swarm_panel.app.endpoint.output_router import OutputRouter
from swarm_panel.runtime.core.request import Request, RequestOutput
from swarm_panel.runtime.scheduling.admission import Settled


class RequestObserver(Protocol):
    """Counts finished requests, called on the event loop (see app.endpoint.prom.ServerMetrics). Latencies come
    from the engine's own step records, not from here."""

    def finished(self, prompt_tokens: int, completion_tokens: int, reason: str | None) -> None: ...


class RequestHandle:
    """One submitted request: its outputs arrive through the router and are read, both on the event loop."""

    def __init__(self, request: Request, router: OutputRouter, observer: RequestObserver | None = None) -> None:
        self.request = request
        self.engine_thread = router.engine_thread
        self.prompt_tokens = request.num_prompt_tokens
        self.completion_tokens = 0
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.finished = False
        self._router = router
        self._observer = observer
        self._items: list[RequestOutput] = []
        self._event = asyncio.Event()

    @property
    def request_id(self) -> int:
        return self.request.request_id

    def submit(self, settled: Settled | None = None) -> None:
        """Queues the request, admitted (`settled`) or to be admitted now; raises RequestRejected or
        EngineUnavailable."""
        self._router.add(self)
        try:
            self.engine_thread.submit(self.request, settled)
        except BaseException:
            self._router.discard(self.request_id)
            raise

    def abort(self) -> None:
        """Ends the request if it still runs; the engine frees its lane and KV at the next step."""
        if not self.finished:
            self.engine_thread.abort(self.request_id)

    def push(self, output: RequestOutput) -> None:
        """One output of one step, from the router (on the event loop)."""
        self.completion_tokens += len(output.token_ids)
        if output.finished and self._observer is not None:
            self._observer.finished(self.prompt_tokens, self.completion_tokens, output.finish_reason)
        self._items.append(output)
        self._event.set()

    def _take(self) -> list[RequestOutput]:
        items, self._items = self._items, []
        if not items:
            # Safe: push runs on this loop too, so nothing arrives between the look and the clear.
            self._event.clear()
        for output in items:
            if output.finished:
                self.finished = True
                self.finish_reason = output.finish_reason
                self.error = output.error
        return items

    async def batches(self) -> AsyncIterator[list[RequestOutput]]:
        """Outputs in arrival order, several at a time when the reader lags; ends after the last."""
        while True:
            items = self._take()
            if items:
                yield items
                if self.finished:
                    return
                continue
            await self._event.wait()
