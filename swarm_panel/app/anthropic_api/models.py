"""Anthropic's Messages API bodies: the request, the message with its content blocks, and its stream events.

A whole message and a stream carry the same blocks (app.anthropic_api.routes builds both with one writer);
every event is a model here and goes on the wire as `model_dump()`, as a whole message does.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from swarm_panel.app.chat.request import MAX_NAME_CHARS, MAX_TOKENS_LIMIT, MAX_TOOLS, _Lenient

# -- the request ---------------------------------------------------------------------------------


class AnthropicMessage(_Lenient):
    # "system" mid-conversation: Claude Code sends them (its mid-conversation-system beta).
    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]


class AnthropicTool(_Lenient):
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    description: str | None = None
    input_schema: dict[str, Any]


class AnthropicToolChoice(_Lenient):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class Metadata(_Lenient):
    user_id: str | None = None


class MessagesRequest(_Lenient):
    model: str = Field("", max_length=1024)
    max_tokens: int = Field(ge=1, le=MAX_TOKENS_LIMIT)
    messages: list[AnthropicMessage] = Field(min_length=1, max_length=100_000)
    system: str | list[dict[str, Any]] | None = None
    tools: list[AnthropicTool] | None = Field(None, max_length=MAX_TOOLS)
    tool_choice: AnthropicToolChoice | None = None
    stop_sequences: list[str] | None = None
    temperature: float = Field(1.0, ge=0.0, le=1.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    stream: bool = False
    metadata: Metadata | None = None


class CountTokensRequest(MessagesRequest):
    max_tokens: int = Field(1, ge=1, le=MAX_TOKENS_LIMIT)


# -- the message ---------------------------------------------------------------------------------


class TextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str = ""


class ThinkingBlock(BaseModel):
    type: Literal["thinking"] = "thinking"
    thinking: str = ""
    signature: str = ""


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


ContentBlock = TextBlock | ThinkingBlock | ToolUseBlock
StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class AnthropicUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    # Anthropic counts cache reads apart from input_tokens.
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


class Message(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ContentBlock] = Field(default_factory=list)
    stop_reason: StopReason | None = None
    stop_sequence: str | None = None
    usage: AnthropicUsage | None = None


# -- stream events -------------------------------------------------------------------------------


class MessageStart(BaseModel):
    type: Literal["message_start"] = "message_start"
    message: Message


class Ping(BaseModel):
    type: Literal["ping"] = "ping"


class ContentBlockStart(BaseModel):
    type: Literal["content_block_start"] = "content_block_start"
    index: int
    content_block: ContentBlock


class TextDelta(BaseModel):
    type: Literal["text_delta"] = "text_delta"
    text: str


class ThinkingDelta(BaseModel):
    type: Literal["thinking_delta"] = "thinking_delta"
    thinking: str


class InputJsonDelta(BaseModel):
    type: Literal["input_json_delta"] = "input_json_delta"
    partial_json: str


class ContentBlockDelta(BaseModel):
    type: Literal["content_block_delta"] = "content_block_delta"
    index: int
    delta: TextDelta | ThinkingDelta | InputJsonDelta


class ContentBlockStop(BaseModel):
    type: Literal["content_block_stop"] = "content_block_stop"
    index: int


class StopDetails(BaseModel):
    stop_reason: StopReason | None  # None in a keep-alive before the reply
    stop_sequence: str | None


class MessageDelta(BaseModel):
    type: Literal["message_delta"] = "message_delta"
    delta: StopDetails
    usage: AnthropicUsage


class MessageStop(BaseModel):
    type: Literal["message_stop"] = "message_stop"


class ErrorDetail(BaseModel):
    type: Literal["api_error"] = "api_error"
    message: str


class StreamError(BaseModel):
    type: Literal["error"] = "error"
    error: ErrorDetail
