"""The n requests one API call submitted for one prompt, read whole or as one merged stream.

Every endpoint (chat, completions, Responses, Anthropic Messages) ends here: its choices are
ordinary scheduler requests, one lane each, so prefix reuse, per-agent figures, cancellation and
/metrics see them as they see any other. The n choices of one prompt share its KV: the scheduler
copies the first lane's computed prompt into the others instead of computing it again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from swarm_panel.app.chat.reply import Reply, ReplyParser, ReplyPiece
from swarm_panel.app.endpoint.request_handle import RequestHandle
from swarm_panel.app.openai_api.logprobs import LogprobCursor
from swarm_panel.runtime.core.request import TokenLogprob


@dataclass(slots=True)
class ChoiceEvent:
    """What one batch of engine outputs added to one choice; `finish_reason` is set on its last event."""

    index: int
    pieces: list[ReplyPiece]
    logprobs: list[TokenLogprob]
    finish_reason: str | None = None
    error: str | None = None


@dataclass(slots=True)
class Choice:
    index: int
    reply: Reply
    finish_reason: str
    logprobs: list[TokenLogprob] = field(default_factory=list)
    stop_sequence: str | None = None
    error: str | None = None


def finish_reason(handle: RequestHandle, made_calls: bool) -> str:
    reason = handle.finish_reason or "stop"
    return "tool_calls" if made_calls and reason == "stop" else reason


class ChatRun:
    def __init__(self, handles: list[RequestHandle], parsers: list[ReplyParser],
                 on_close: Callable[[RequestHandle], None], *, note: str | None = None,
                 on_end: Callable[[ChatRun], None] | None = None, started: float | None = None) -> None:
        self.handles = handles
        self._parsers = parsers
        self._on_close = on_close
        self._on_end = on_end
        self._closed = False
        # Why max_tokens is less than asked, for the reply's headers and the request log.
        self.note = note
        self.started = time.monotonic() if started is None else started
        self.first_output_at: float | None = None

    @property
    def prompt_tokens(self) -> int:
        return self.handles[0].prompt_tokens

    def usage(self) -> dict[str, int | dict[str, int]]:
        completion = sum(h.completion_tokens for h in self.handles)
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
            # The prompt is counted once; a token counts as cached when no choice had to compute it.
            "prompt_tokens_details": {"cached_tokens": min(h.request.num_cached_tokens for h in self.handles)},
        }

    def close(self) -> None:
        """Aborts what still runs; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        for handle in self.handles:
            handle.abort()
            self._on_close(handle)
        if self._on_end is not None:
            self._on_end(self)

    async def collect(self) -> list[Choice]:
        """Every choice whole."""
        replies = [Reply() for _ in self.handles]
        logprobs: list[list[TokenLogprob]] = [[] for _ in self.handles]
        async for event in self.events():
            replies[event.index].add(event.pieces)
            logprobs[event.index].extend(event.logprobs)
        return [
            Choice(i, reply, finish_reason(h, bool(reply.calls)), logprobs[i], h.request.stop_sequence, h.error)
            for i, (h, reply) in enumerate(zip(self.handles, replies, strict=True))
        ]

    async def events(self) -> AsyncIterator[ChoiceEvent]:
        """Every choice's events as they come, choices interleaved."""
        streams = [self._choice_events(i) for i in range(len(self.handles))]
        if len(streams) == 1:
            async for event in streams[0]:
                yield event
            return
        async for event in _merge(streams):
            yield event

    async def _choice_events(self, index: int) -> AsyncIterator[ChoiceEvent]:
        handle, parser = self.handles[index], self._parsers[index]
        cursor = LogprobCursor(handle.request.output_logprobs)
        made_calls = False
        async for batch in handle.batches():
            if self.first_output_at is None and any(o.token_ids for o in batch):
                self.first_output_at = time.monotonic()
            pieces = parser.feed("".join(output.text for output in batch))
            if handle.finished:
                pieces += parser.finish()
            made_calls = made_calls or any(p.kind == "call" for p in pieces)
            event = ChoiceEvent(index, pieces, cursor.take(sum(len(o.token_ids) for o in batch)))
            if handle.finished:
                event.finish_reason = finish_reason(handle, made_calls)
                event.error = handle.error if handle.finish_reason == "error" else None
            yield event


async def _merge(streams: list[AsyncIterator[ChoiceEvent]]) -> AsyncIterator[ChoiceEvent]:
    queue: asyncio.Queue[ChoiceEvent | BaseException | None] = asyncio.Queue()

    async def pump(stream: AsyncIterator[ChoiceEvent]) -> None:
        try:
            async for event in stream:
                await queue.put(event)
        except Exception as exc:  # noqa: BLE001 - handed to the reader, which raises it
            await queue.put(exc)
        finally:
            await queue.put(None)

    tasks = [asyncio.create_task(pump(s)) for s in streams]
    try:
        running = len(tasks)
        while running:
            item = await queue.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
