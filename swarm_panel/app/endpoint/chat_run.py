"""One API call's run: the n requests it submitted for one prompt, their outputs carried from the engine
thread onto the event loop, read whole or as one merged stream, and its line in the request log.

Every endpoint (chat, completions, Responses, Anthropic Messages) ends here: its choices are
ordinary scheduler requests, one lane each, so prefix reuse, per-agent figures, cancellation and
/metrics see them as they see any other. The n choices of one prompt share its KV: the scheduler
copies the first lane's computed prompt into the others instead of computing it again.

Outputs cross the thread boundary once per step: an OutputRouter subscribes to the EngineThread and,
after every step, on the engine thread, picks the outputs of the requests it routes and hands them all
to its loop in one `call_soon_threadsafe`; there each goes to its RequestHandle, which queues them and
sets its event (a consumer that falls behind takes several in one go). So a step that feeds 64 streams
costs one self-pipe write and no locks, where a wake-up per request per token used to.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from starlette.requests import Request

from swarm_panel.app.chat.request import Reply, ReplyParser, ReplyPiece
from swarm_panel.app.endpoint.errors import APIError
from swarm_panel.app.endpoint.wire import agent_from_scope
from swarm_panel.app.service.agents import RequestLog, RequestRecord
from swarm_panel.runtime.core.request import Request as EngineRequest
from swarm_panel.runtime.core.request import RequestOutput, TokenLogprob
from swarm_panel.runtime.scheduling.lanes import Settled
from swarm_panel.runtime.serving.engine_core import EngineThread


class OutputReader(Protocol):
    """A request's reader on the loop (RequestHandle, below)."""

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

    def _on_step(self, outputs: Sequence[tuple[EngineRequest, RequestOutput]]) -> None:
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


class RequestObserver(Protocol):
    """Counts finished requests, called on the event loop (see app.endpoint.prom.ServerMetrics). Latencies come
    from the engine's own step records, not from here."""

    def finished(self, prompt_tokens: int, completion_tokens: int, reason: str | None) -> None: ...


class RequestHandle:
    """One submitted request: its outputs arrive through the router and are read, both on the event loop."""

    def __init__(self, request: EngineRequest, router: OutputRouter, observer: RequestObserver | None = None) -> None:
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


class LogprobCursor:
    """Takes a request's logprobs in step with the tokens its outputs delivered (end tokens left out)."""

    def __init__(self, entries: list[TokenLogprob]) -> None:
        self._entries = entries
        self._taken = 0

    def take(self, num_tokens: int) -> list[TokenLogprob]:
        # The engine appends an entry before the output that carries its token is delivered.
        got = self._entries[self._taken:self._taken + num_tokens]
        self._taken += len(got)
        return [e for e in got if not e.end]


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


# Set in a request's ASGI scope once its run wrote its line, so the error handler does not write a second.
RECORDED = "swarm_panel.recorded"

# A run that ended without an answer: the engine failed it, or the client hung up (nginx's 499).
STATUS_OF_FINISH = {"error": 500, "abort": 499}


def run_record(run: ChatRun, agent: str, endpoint: str) -> RequestRecord:
    first = run.handles[0]
    reused = min(h.request.num_cached_tokens for h in run.handles)
    finish = first.finish_reason or "abort"
    note = run.note
    if finish == "error" and first.error:
        note = f"{note}; {first.error}" if note else first.error
    return RequestRecord(
        agent=agent, endpoint=endpoint, status=STATUS_OF_FINISH.get(finish, 200),
        prompt_tokens=run.prompt_tokens, computed_tokens=run.prompt_tokens - reused, reused_tokens=reused,
        output_tokens=sum(h.completion_tokens for h in run.handles), finish=finish,
        ttft_s=None if run.first_output_at is None else run.first_output_at - run.started,
        seconds=time.monotonic() - run.started, note=note,
    )


def record_error(log: RequestLog, request: Request, error: APIError) -> None:
    """An API call refused before (or failed after) it ran: its status and message at WARNING. Only the
    API's routes: a client probing `/` (Claude Code sends `HEAD /`) is not a request that stalled."""
    if request.scope.get(RECORDED) or not request.url.path.startswith("/v1/"):
        return
    request.scope[RECORDED] = True
    agent = agent_from_scope(request.scope) or request.headers.get("x-agent-name") or "anonymous"
    log.record(RequestRecord(agent=agent, endpoint=request.url.path, status=error.status, finish="error",
                             note=error.message))
