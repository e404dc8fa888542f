"""OpenAI's stream writer: a run's events as Chat Completions and Completions chunks, then [DONE]."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

from swarm_panel.app.endpoint.chat_run import ChatRun
from swarm_panel.app.endpoint.wire import DONE, sse
from swarm_panel.app.openai_api.errors import error_body
from swarm_panel.app.openai_api.models import (
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatDelta,
    CompletionChoice,
    CompletionChunk,
    ResponseFunction,
    ResponseToolCall,
    Usage,
    chat_logprobs,
    completion_logprobs,
)


def stream_error(message: str) -> bytes:
    return sse(error_body(500, message, code="engine_error"))


class ChunkMaker:
    """The chunks of one streamed reply: its fixed head, and whether `usage` goes on the wire."""

    def __init__(self, chunk_type: type[ChatCompletionChunk | CompletionChunk], response_id: str, model: str,
                 include_usage: bool) -> None:
        self._type = chunk_type
        self._head = {"id": response_id, "created": int(time.time()), "model": model}
        self.include_usage = include_usage
        # OpenAI sends usage on every chunk (null until the last) only to a client that asked for it.
        self._exclude = None if include_usage else {"usage"}

    def chunk(self, choice: ChatChunkChoice | CompletionChoice) -> bytes:
        return sse(self._type(**self._head, choices=[choice]).model_dump(exclude=self._exclude))

    def usage_chunk(self, usage: Usage) -> bytes:
        return sse(self._type(**self._head, choices=[], usage=usage).model_dump())


async def chat_stream(run: ChatRun, chunks: ChunkMaker, with_logprobs: bool) -> AsyncIterator[bytes]:
    num_calls = [0] * len(run.handles)
    for index in range(len(run.handles)):
        yield chunks.chunk(ChatChunkChoice(index=index, delta=ChatDelta(role="assistant", content="")))
    error = None
    async for event in run.events():
        logprobs = chat_logprobs(event.logprobs) if with_logprobs and event.logprobs else None
        for piece in event.pieces:
            if piece.kind == "call":
                call = piece.call
                delta = ChatDelta(tool_calls=[ResponseToolCall(
                    index=num_calls[event.index], id=call.id,
                    function=ResponseFunction(name=call.name, arguments=call.arguments))])
                num_calls[event.index] += 1
            elif piece.kind == "reasoning":
                delta = ChatDelta(reasoning_content=piece.text)
            else:
                delta = ChatDelta(content=piece.text)
            yield chunks.chunk(ChatChunkChoice(index=event.index, delta=delta, logprobs=logprobs))
            logprobs = None
        if logprobs is not None or event.finish_reason is not None:
            yield chunks.chunk(ChatChunkChoice(index=event.index, delta=ChatDelta(), logprobs=logprobs,
                                               finish_reason=event.finish_reason))
        error = error or event.error
    for end in _stream_end(run, chunks, error):
        yield end


async def completion_stream(run: ChatRun, chunks: ChunkMaker, echo: str, with_logprobs: bool) -> AsyncIterator[bytes]:
    offsets = [len(echo)] * len(run.handles)
    if echo:
        for index in range(len(run.handles)):
            yield chunks.chunk(CompletionChoice(index=index, text=echo))
    error = None
    async for event in run.events():
        text = "".join(piece.text for piece in event.pieces)
        logprobs = completion_logprobs(event.logprobs, offsets[event.index]) if with_logprobs else None
        offsets[event.index] += sum(len(t) for t in logprobs.tokens) if logprobs else 0
        if text or logprobs and logprobs.tokens or event.finish_reason is not None:
            yield chunks.chunk(CompletionChoice(index=event.index, text=text, logprobs=logprobs,
                                                finish_reason=event.finish_reason))
        error = error or event.error
    for end in _stream_end(run, chunks, error):
        yield end


def _stream_end(run: ChatRun, chunks: ChunkMaker, error: str | None) -> Iterator[bytes]:
    """An error event if a choice failed, else the usage chunk when asked for; then [DONE]."""
    if error is not None:
        yield stream_error(error)
    elif chunks.include_usage:
        yield chunks.usage_chunk(Usage(**run.usage()))
    yield DONE
