"""Server-sent events every API's stream writer shares (one `sse`), keep-alives on a quiet stream, and hang-ups.

A client that hangs up has its request aborted: the engine frees its lane and KV at the next step.
Streams learn of the hang-up from Starlette, which cancels a StreamingResponse when the client's
disconnect message arrives; a whole reply waits on that same message beside its outputs
(`unless_hung_up`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
from pydantic import BaseModel
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

T = TypeVar("T")


class ClientGone(Exception):
    """The client hung up before its request finished (answered, if at all, with a 499)."""


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE = b"data: [DONE]\n\n"
# An SSE comment: every SSE parser skips it (the OpenAI SDKs' included), yet it keeps the connection busy.
KEEPALIVE = b": keep-alive\n\n"


async def unless_hung_up(receive: Receive, work: Awaitable[T]) -> T:
    """`work`'s result, or ClientGone as soon as the client's disconnect message arrives.

    The same wait Starlette's StreamingResponse does for streams, for replies sent whole: once the
    body is read, the next message the server hands the app is the disconnect.
    """
    task = asyncio.ensure_future(work)
    hang_up = asyncio.ensure_future(_disconnect(receive))
    try:
        await asyncio.wait({task, hang_up}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        pending = [waiter for waiter in (task, hang_up) if not waiter.done()]
        for waiter in pending:
            waiter.cancel()
        # The work's own cleanup (its generators' finally blocks) runs before the caller goes on.
        await asyncio.gather(*pending, return_exceptions=True)
    if task.cancelled():
        raise ClientGone
    return task.result()


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class EventStreamResponse(StreamingResponse):
    """An SSE response that runs `on_close` however it ends: done, failed, or cancelled by a hang-up."""

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None],
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(content, media_type="text/event-stream", headers={**SSE_HEADERS, **(headers or {})})
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


async def with_heartbeat(events: AsyncIterator[bytes], every_s: float,
                         beat: Callable[[], bytes] = lambda: KEEPALIVE) -> AsyncIterator[bytes]:
    """`events`, with `beat()` in between whenever `every_s` pass without one (0: never).

    A stream can be quiet for minutes while a long prompt computes or waits behind others, and
    agents' idle watchdogs (Claude Code's, Codex's: five minutes of no bytes or no events) then
    hang up and send the whole request again, recomputing what was already under way.
    """
    if every_s <= 0:
        async for chunk in events:
            yield chunk
        return
    source = aiter(events)
    pending = asyncio.ensure_future(anext(source))
    try:
        while True:
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not done:
                yield beat()
                continue
            try:
                chunk = pending.result()
            except StopAsyncIteration:
                return
            yield chunk
            pending = asyncio.ensure_future(anext(source))
    finally:
        # Shielded: a hang-up cancels through Starlette's anyio scope, which cancels this task again at
        # every await, and closing `source` while the read under way has not ended would leave the
        # other side's request running (a backend's, behind the gateway).
        with anyio.CancelScope(shield=True):
            if not pending.done():
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                await aclose()


async def relayed_with_heartbeat(chunks: AsyncIterator[bytes], every_s: float, beat: bytes) -> AsyncIterator[bytes]:
    """Raw event-stream bytes from another server, with `beat` whenever `every_s` pass without any, but
    only where an event has ended: a raw chunk may stop in the middle of one."""
    quiet = object()
    tail = b"\n\n"
    # Closed with this one: its pending read of `chunks` must end before anyone closes their source.
    async with contextlib.aclosing(with_heartbeat(chunks, every_s, lambda: quiet)) as beating:
        async for chunk in beating:
            if chunk is quiet:
                if tail.endswith((b"\n\n", b"\r\r", b"\r\n\r\n")):
                    yield beat
                continue
            tail = (tail + chunk)[-4:]
            yield chunk


def sse(payload: dict[str, Any], event: str | None = None) -> bytes:
    """One server-sent event; `event` names it, as the Responses and Anthropic streams do."""
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def sse_event(event: BaseModel) -> bytes:
    """A typed stream event (Responses, Anthropic), named by its `type` as those streams name them."""
    return sse(event.model_dump(), event=event.type)
