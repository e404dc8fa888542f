"""The OpenAI-compatible response bodies, and the engine's logprobs in their two shapes (chat and legacy
completions): a whole reply (ChatCompletion, Completion) and each chunk of
a streamed one (ChatCompletionChunk, CompletionChunk) are models here alike and go on the wire as
`model_dump()`; fields that are absent rather than null are left out by `exclude_if`. The request
bodies every chat-shaped API shares are app.chat.request's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from swarm_panel.runtime.core.request import TokenLogprob


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class ResponseFunction(BaseModel):
    name: str | None = None
    arguments: str


def _absent(value: Any) -> bool:
    return value is None


class ResponseToolCall(BaseModel):
    index: int | None = Field(None, exclude_if=_absent)  # streamed deltas only
    id: str | None = Field(None, exclude_if=_absent)
    type: Literal["function"] | None = Field("function", exclude_if=_absent)
    function: ResponseFunction


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprobOut(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[TokenLogprobOut]
    refusal: None = None


class AssistantMessage(BaseModel):
    """The assistant's reply: whole in a completion (ResponseMessage), in pieces in a chunk (ChatDelta)."""

    # Role and content are sent even when null; the rest only when there.
    role: Literal["assistant"] | None = "assistant"
    content: str | None = None
    reasoning_content: str | None = Field(None, exclude_if=_absent)
    tool_calls: list[ResponseToolCall] | None = Field(None, exclude_if=_absent)


class ResponseMessage(AssistantMessage):
    pass


class ChatDelta(AssistantMessage):
    """Only what this chunk adds: nothing is sent as null."""

    role: Literal["assistant"] | None = Field(None, exclude_if=_absent)
    content: str | None = Field(None, exclude_if=_absent)


class ChatChoice(BaseModel):
    index: int = 0
    message: ResponseMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str


class ReplyHead(BaseModel):
    """What a whole reply and each streamed chunk of one begin with."""

    id: str
    object: str
    created: int
    model: str


class ChatCompletion(ReplyHead):
    object: Literal["chat.completion"] = "chat.completion"
    choices: list[ChatChoice]
    usage: Usage


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(ReplyHead):
    """One event of a streamed chat completion; `usage` goes on the wire only when the client asked for it."""

    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None


class Completion(ReplyHead):
    object: Literal["text_completion"] = "text_completion"
    choices: list[CompletionChoice]
    usage: Usage


class CompletionChunk(ReplyHead):
    """One event of a streamed completion: the choice's new text; `usage` as in ChatCompletionChunk."""

    object: Literal["text_completion"] = "text_completion"
    choices: list[CompletionChoice]
    usage: Usage | None = None


def _text(piece: bytes) -> str:
    return piece.decode("utf-8", errors="replace")


def chat_logprobs(entries: Sequence[TokenLogprob]) -> ChatLogprobs:
    return ChatLogprobs(content=[
        TokenLogprobOut(token=_text(e.piece), logprob=e.logprob, bytes=list(e.piece),
                        top_logprobs=[TopLogprob(token=_text(p), logprob=lp, bytes=list(p)) for _, p, lp in e.top])
        for e in entries
    ])


def completion_logprobs(entries: Sequence[TokenLogprob], text_offset: int = 0) -> CompletionLogprobs:
    tokens, offsets, offset = [], [], text_offset
    for e in entries:
        tokens.append(_text(e.piece))
        offsets.append(offset)
        offset += len(tokens[-1])
    return CompletionLogprobs(
        tokens=tokens,
        token_logprobs=[e.logprob for e in entries],
        top_logprobs=[{_text(p): lp for _, p, lp in e.top} for e in entries],
        text_offset=offsets,
    )
