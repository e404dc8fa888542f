"""Two byte streams joined both ways, as the bytes come: what the relay, the bridge and the proxy forward.

Nothing is buffered beyond one read (a server's event stream passes token by token). An end of input is
passed on as a half-close, so the other side sees the request end as it would; a reset, or one side
closing outright, closes both.
"""

from __future__ import annotations

import asyncio
import contextlib

CHUNK = 64 * 1024


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(CHUNK):
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()


async def splice(a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 b: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
    """Forwards a to b and b to a until both have ended (or either fails), then closes both."""
    pumps = [asyncio.ensure_future(_pump(a[0], b[1])), asyncio.ensure_future(_pump(b[0], a[1]))]
    try:
        pending: set[asyncio.Future] = set(pumps)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if any(task.exception() is not None for task in done):
                break  # a reset on one side: the other is told by its close, not left waiting
    finally:
        for task in pumps:
            task.cancel()
        for writer in (a[1], b[1]):
            writer.close()
        for task in pumps:
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await task
        for writer in (a[1], b[1]):
            with contextlib.suppress(OSError):
                await writer.wait_closed()
