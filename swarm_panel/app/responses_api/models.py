"""OpenAI's Responses API bodies: the request, the response with its output items, and its stream events.

A whole response and a stream carry the same items (app.responses_api.routes builds both with one writer);
every event is a model here and goes on the wire as `model_dump()`, as a whole response does.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from swarm_panel.app.chat.request import (
    MAX_TOKENS_LIMIT,
    PenaltyField,
    TemperatureField,
    TopPField,
    UserField,
    _Lenient,
)

# -- the request ---------------------------------------------------------------------------------


class TextFormat(_Lenient):
    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str = "response"
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class TextOptions(_Lenient):
    format: TextFormat | None = None


class ResponsesRequest(_Lenient):
    model: str = Field("", max_length=1024)
    input: str | list[dict[str, Any]] = Field(max_length=100_000)
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = Field(None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float | None = TemperatureField
    top_p: float | None = TopPField
    presence_penalty: float = PenaltyField
    frequency_penalty: float = PenaltyField
    text: TextOptions | None = None
    stream: bool = False
    user: str | None = UserField
    previous_response_id: str | None = Field(None, max_length=256)
    prompt_cache_key: str | None = Field(None, max_length=1024)
    store: bool = True
    conversation: str | dict[str, Any] | None = None
    top_logprobs: int | None = None

    @field_validator("conversation")
    @classmethod
    def _no_conversations(cls, value: Any) -> Any:
        if value:
            raise ValueError("the Conversations API is not offered: use previous_response_id, or resend the whole "
                             "conversation as input items")
        return value

    @field_validator("top_logprobs")
    @classmethod
    def _no_logprobs(cls, value: int | None) -> int | None:
        if value:
            raise ValueError("logprobs are not offered on /v1/responses; use /v1/chat/completions")
        return value


# -- output items --------------------------------------------------------------------------------

ItemStatus = Literal["in_progress", "completed"]


class OutputText(BaseModel):
    type: Literal["output_text"] = "output_text"
    text: str = ""
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[Any] = Field(default_factory=list)


class ReasoningText(BaseModel):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str = ""


class MessageItem(BaseModel):
    type: Literal["message"] = "message"
    id: str
    status: ItemStatus = "in_progress"
    role: Literal["assistant"] = "assistant"
    content: list[OutputText] = Field(default_factory=lambda: [OutputText()])


class ReasoningItem(BaseModel):
    type: Literal["reasoning"] = "reasoning"
    id: str
    summary: list[Any] = Field(default_factory=list)
    status: ItemStatus = "in_progress"
    content: list[ReasoningText] = Field(default_factory=lambda: [ReasoningText()])


class FunctionCallItem(BaseModel):
    type: Literal["function_call"] = "function_call"
    id: str
    call_id: str
    name: str
    namespace: str | None = None
    arguments: str = ""
    status: ItemStatus = "in_progress"


OutputItem = MessageItem | ReasoningItem | FunctionCallItem
TextItem = MessageItem | ReasoningItem

# -- the response --------------------------------------------------------------------------------

ResponseStatus = Literal["in_progress", "completed", "incomplete", "failed"]


class InputTokensDetails(BaseModel):
    cached_tokens: int
    # The official SDK (openai 2.x and later) requires it; nothing is written to a cache on request here.
    cache_write_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class ResponsesUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int


class ResponseError(BaseModel):
    code: Literal["server_error"] = "server_error"
    message: str


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens"] = "max_output_tokens"


class Response(BaseModel):
    id: str
    object: Literal["response"] = "response"
    created_at: int
    model: str
    instructions: str | None
    tools: list[dict[str, Any]]
    tool_choice: str | dict[str, Any]
    parallel_tool_calls: bool
    temperature: float
    top_p: float
    max_output_tokens: int | None
    previous_response_id: str | None = None
    text: dict[str, Any]
    metadata: dict[str, Any]
    store: bool = False
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    usage: ResponsesUsage | None = None
    status: ResponseStatus = "in_progress"
    output: list[OutputItem] = Field(default_factory=list)


# -- stream events -------------------------------------------------------------------------------


class _Event(BaseModel):
    type: str
    sequence_number: int


class ResponseEvent(_Event):
    type: Literal["response.created", "response.in_progress", "response.completed", "response.incomplete",
                  "response.failed"]
    response: Response


class OutputItemEvent(_Event):
    type: Literal["response.output_item.added", "response.output_item.done"]
    output_index: int
    item: OutputItem


class _ItemEvent(_Event):
    item_id: str
    output_index: int


class ContentPartEvent(_ItemEvent):
    type: Literal["response.content_part.added", "response.content_part.done"]
    content_index: int = 0
    part: OutputText


class ReasoningTextDelta(_ItemEvent):
    type: Literal["response.reasoning_text.delta"] = "response.reasoning_text.delta"
    content_index: int = 0
    delta: str


class OutputTextDelta(_ItemEvent):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    content_index: int = 0
    delta: str
    logprobs: list[Any] = Field(default_factory=list)


class ReasoningTextDone(_ItemEvent):
    type: Literal["response.reasoning_text.done"] = "response.reasoning_text.done"
    content_index: int = 0
    text: str


class OutputTextDone(_ItemEvent):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    content_index: int = 0
    text: str
    logprobs: list[Any] = Field(default_factory=list)


class FunctionCallArgumentsDelta(_ItemEvent):
    type: Literal["response.function_call_arguments.delta"] = "response.function_call_arguments.delta"
    delta: str


class FunctionCallArgumentsDone(_ItemEvent):
    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    name: str
    arguments: str
