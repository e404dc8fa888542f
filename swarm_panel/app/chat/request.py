"""A chat request, from its body to its reply's text: the request as the endpoint core takes it (OpenAI's
bodies, every field bounded), its messages and tools as the model's chat template receives them
(`for_template`), and one choice's raw text split into reasoning, content and tool calls as it streams
(`ReplyParser`). Chat Completions and Completions arrive in these bodies; the Responses and Anthropic APIs
translate theirs into a ChatCompletionRequest.

Request models ignore fields they do not know (clients send many), so an unknown option is never an
error; a known one out of range always is (a 400, never a 500). The upper bound of max_tokens is the
engine's context, which only the server knows: it is checked when the request is built.

A template that renders no tools (GENERIC) gets them as a system prompt that teaches Hermes tags,
and its history's tool calls and results as text in those tags, so a model that was never shown
the format still sees what it called and what came back.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swarm_panel.app.chat.reasoning import ReasoningSplitter, ThinkTags
from swarm_panel.app.chat.tool_call_formats import ParsedToolCall, Tools
from swarm_panel.app.chat.tool_calls import ToolCallFormat, ToolCallStreamParser
from swarm_panel.runtime.core.request import MAX_TOP_LOGPROBS

log = logging.getLogger(__name__)

MAX_STOP_STRINGS = 4
MAX_STOP_CHARS = 256
MAX_NAME_CHARS = 256
MAX_TOOLS = 128
MAX_LOGIT_BIAS = 1024
# Choices per request: each is a lane, so the width bounds what is useful.
MAX_CHOICES = 16
MAX_GRAMMAR_CHARS = 65536
# No engine here has a longer context; the real limit is checked against the engine.
MAX_TOKENS_LIMIT = 1 << 20

Role = Literal["system", "user", "assistant", "tool", "developer"]

# -- shared field definitions ------------------------------------------------------------------

MaxTokensField = Field(None, ge=1, le=MAX_TOKENS_LIMIT,
                       description="Most tokens to generate; default: the rest of the context, at most 4096")
TemperatureField = Field(1.0, ge=0.0, le=2.0, description="Sampling temperature; 0 = greedy")
TopPField = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass")
PenaltyField = Field(0.0, ge=-2.0, le=2.0, description="OpenAI-style penalty, -2..2")
SeedField = Field(None, ge=-(1 << 63), lt=1 << 64, description="Seed for reproducible sampling")
UserField = Field(None, max_length=MAX_NAME_CHARS, description="The agent's name (falls back to X-Agent-Name)")
NField = Field(1, ge=1, le=MAX_CHOICES, description="Choices per request, one lane each, sharing the prompt's KV")
StopField = Field(None, description=f"Up to {MAX_STOP_STRINGS} strings that end the output")
LogitBiasField = Field(None, description="Token id -> bias within -100..100")
TopKField = Field(0, ge=0, le=1 << 20, description="llama.cpp extension: top-k (0 = off)")
MinPField = Field(0.0, ge=0.0, le=1.0, description="llama.cpp extension: min-p (0 = off)")
RepeatPenaltyField = Field(1.0, ge=0.0, le=10.0, description="llama.cpp extension: repeat penalty (1 = off)")
IgnoreEosField = Field(False, description="llama.cpp extension: never stop at end-of-generation tokens")
GrammarField = Field(None, max_length=MAX_GRAMMAR_CHARS,
                     description="llama.cpp extension: a GBNF grammar (rule 'root') the output must match")


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Lenient):
    include_usage: bool = Field(False, description="Send a last chunk with token usage")


class FunctionCall(_Lenient):
    name: str = Field(max_length=MAX_NAME_CHARS)
    arguments: str | dict[str, Any] = ""


class ToolCall(_Lenient):
    id: str | None = Field(None, max_length=MAX_NAME_CHARS)
    type: Literal["function"] = "function"
    function: FunctionCall


class ContentPart(_Lenient):
    type: str
    text: str | None = None


class ChatMessage(_Lenient):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = Field(None, max_length=MAX_NAME_CHARS)
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = Field(None, max_length=MAX_NAME_CHARS)

    @field_validator("content")
    @classmethod
    def _text_parts_only(cls, value: str | list[ContentPart] | None) -> str | list[ContentPart] | None:
        if isinstance(value, list):
            for part in value:
                if part.type != "text" or part.text is None:
                    raise ValueError(f"only text content parts are supported, got {part.type!r}")
        return value

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text or "" for part in self.content)
        return self.content or ""

    def for_template(self) -> dict[str, Any]:
        """The message as a chat template expects it: plain string content, arguments as JSON text."""
        # Few chat templates know OpenAI's "developer" role; it means what "system" means to them.
        role = "system" if self.role == "developer" else self.role
        message: dict[str, Any] = {"role": role, "content": self.text()}
        if self.name is not None:
            message["name"] = self.name
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        if self.tool_calls:
            message["tool_calls"] = [call.model_dump() for call in self.tool_calls]
        return message


class FunctionDefinition(_Lenient):
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(_Lenient):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Lenient):
    name: str = Field(max_length=MAX_NAME_CHARS)


class NamedToolChoice(_Lenient):
    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class SamplingRequest(_Lenient):
    """The knobs chat and completions share."""

    model: str = Field("", max_length=1024, description="Ignored: the server runs one model")
    max_tokens: int | None = MaxTokensField
    temperature: float = TemperatureField
    top_p: float = TopPField
    n: int = NField
    stop: str | list[str] | None = StopField
    logit_bias: dict[str, float] | None = LogitBiasField
    presence_penalty: float = PenaltyField
    frequency_penalty: float = PenaltyField
    seed: int | None = SeedField
    user: str | None = UserField
    stream: bool = False
    stream_options: StreamOptions | None = None
    top_k: int = TopKField
    min_p: float = MinPField
    repeat_penalty: float = RepeatPenaltyField
    ignore_eos: bool = IgnoreEosField
    grammar: str | None = GrammarField

    @field_validator("stop")
    @classmethod
    def _bounded_stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if len(stops) > MAX_STOP_STRINGS:
            raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings, got {len(stops)}")
        for stop in stops:
            if not stop or len(stop) > MAX_STOP_CHARS:
                raise ValueError(f"stop strings must hold 1..{MAX_STOP_CHARS} characters")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _bounded_bias(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is None:
            return None
        if len(value) > MAX_LOGIT_BIAS:
            raise ValueError(f"at most {MAX_LOGIT_BIAS} logit_bias entries, got {len(value)}")
        for key, bias in value.items():
            try:
                token = int(key)
            except ValueError:
                raise ValueError(f"logit_bias keys must be token ids, got {key!r}") from None
            if token < 0:
                raise ValueError(f"logit_bias token ids must not be negative, got {token}")
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"logit_bias values must be within -100..100, got {bias} for token {token}")
        return value

    @property
    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    @property
    def bias_by_token(self) -> dict[int, float]:
        return {int(k): v for k, v in (self.logit_bias or {}).items()}

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    @property
    def top_logprobs_count(self) -> int | None:
        """Top alternatives to report per token; None: no logprobs at all."""
        return None


class JsonSchemaFormat(_Lenient):
    name: str = Field("response", max_length=MAX_NAME_CHARS)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Lenient):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and (self.json_schema is None or self.json_schema.schema_ is None):
            raise ValueError("response_format json_schema needs json_schema.schema")
        return self


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1, max_length=100_000)
    tools: list[Tool] | None = Field(None, max_length=MAX_TOOLS)
    tool_choice: ToolChoice | None = None
    max_completion_tokens: int | None = MaxTokensField
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool | None = Field(None, description="Return each output token's log-probability")
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS,
                                     description="Most likely alternatives per token (needs logprobs)")

    @model_validator(mode="after")
    def _named_tool_exists(self) -> ChatCompletionRequest:
        if isinstance(self.tool_choice, NamedToolChoice):
            names = {tool.function.name for tool in self.tools or []}
            if self.tool_choice.function.name not in names:
                raise ValueError(f"tool_choice names {self.tool_choice.function.name!r}, which is not in tools")
        elif self.tool_choice == "required" and not self.tools:
            raise ValueError("tool_choice 'required' needs tools")
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        return self

    @property
    def top_logprobs_count(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    @property
    def forces_tool_call(self) -> bool:
        return bool(self.tools) and (self.tool_choice == "required" or isinstance(self.tool_choice, NamedToolChoice))

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def template_tools(self) -> list[dict[str, Any]] | None:
        """The tools the chat template sees: none for tool_choice 'none', only the named one if one is named."""
        if not self.tools or self.tool_choice == "none":
            return None
        tools = self.tools
        if isinstance(self.tool_choice, NamedToolChoice):
            tools = [t for t in tools if t.function.name == self.tool_choice.function.name]
        return [tool.model_dump(exclude_none=True) for tool in tools]


class CompletionRequest(SamplingRequest):
    prompt: str | list[int] | list[str] = Field(description="Text, or token ids; a list of texts must hold one")
    echo: bool = False
    suffix: str | None = None
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS,
                                 description="Return each token's log-probability and this many alternatives")

    @property
    def top_logprobs_count(self) -> int | None:
        return self.logprobs

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[int] | list[str]) -> str | list[int] | list[str]:
        if isinstance(value, list):
            if not value:
                raise ValueError("prompt must not be empty")
            if isinstance(value[0], str) and len(value) != 1:
                raise ValueError("only one prompt per request is supported")
        return value

    @field_validator("suffix")
    @classmethod
    def _no_suffix(cls, value: str | None) -> str | None:
        if value:
            raise ValueError("suffix is not supported by this server")
        return value


# -- messages and tools as the chat template receives them -------------------------------------

GENERIC_TOOLS_PROMPT = (
    "You can call these tools. Each is described by a JSON schema:\n<tools>\n{tools}\n</tools>\n\n"
    "To call a tool, reply with a JSON object holding its name and arguments inside tags, like this:\n"
    "<tool_call>\n{{\"name\": \"<tool name>\", \"arguments\": {{<arguments>}}}}\n</tool_call>"
)


def for_template(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 fmt: ToolCallFormat) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    if fmt is not ToolCallFormat.GENERIC:
        return messages, tools
    out = [_as_text(m) for m in messages]
    if tools:
        prompt = GENERIC_TOOLS_PROMPT.format(tools="\n".join(json.dumps(t.get("function", t)) for t in tools))
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{prompt}"}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out, None


def _as_text(message: dict[str, Any]) -> dict[str, Any]:
    if message.get("tool_calls"):
        blocks = []
        for call in message["tool_calls"]:
            function = call.get("function", call)
            arguments = function.get("arguments") or {}
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments) if arguments.strip() else {}
                except ValueError:
                    pass
            blocks.append("<tool_call>\n" + json.dumps({"name": function.get("name"), "arguments": arguments})
                          + "\n</tool_call>")
        text = "\n".join(filter(None, [message.get("content") or "", *blocks]))
        return {k: v for k, v in message.items() if k != "tool_calls"} | {"content": text}
    if message.get("role") == "tool":
        return {**message, "content": f"<tool_response>\n{message.get('content') or ''}\n</tool_response>"}
    return message


# -- the reply's raw text, split as it streams -------------------------------------------------

@dataclass(slots=True)
class ReplyPiece:
    kind: Literal["reasoning", "content", "call"]
    text: str = ""
    call: ParsedToolCall | None = None


@dataclass(slots=True)
class Reply:
    """A whole reply, as the non-streaming endpoints return it."""

    reasoning: str = ""
    content: str = ""
    calls: list[ParsedToolCall] = field(default_factory=list)

    def add(self, pieces: list[ReplyPiece]) -> None:
        for piece in pieces:
            if piece.kind == "reasoning":
                self.reasoning += piece.text
            elif piece.kind == "content":
                self.content += piece.text
            else:
                self.calls.append(piece.call)


class ReplyParser:
    """Think tags first (when the template has them), then tool calls in what is left (when tools were offered)."""

    def __init__(self, fmt: ToolCallFormat | None = None, tools: Tools = None, parallel: bool = True,
                 think: ThinkTags | None = None, thinking: bool = False) -> None:
        self._think = ReasoningSplitter(think, thinking) if think is not None else None
        self._tools = ToolCallStreamParser(fmt, tools) if fmt is not None else None
        self._parallel = parallel
        self._num_calls = 0

    def feed(self, text: str) -> list[ReplyPiece]:
        return self._pieces(text, final=False)

    def finish(self) -> list[ReplyPiece]:
        return self._pieces("", final=True)

    def _pieces(self, text: str, final: bool) -> list[ReplyPiece]:
        pieces: list[ReplyPiece] = []
        content = text
        if self._think is not None:
            reasoning, content = self._think.finish() if final else self._think.feed(text)
            if reasoning:
                pieces.append(ReplyPiece("reasoning", reasoning))
        calls: list[ParsedToolCall] = []
        if self._tools is not None:
            content, calls = self._tools.feed(content)
            if final:
                rest, more = self._tools.finish()
                content, calls = content + rest, calls + more
        if content:
            pieces.append(ReplyPiece("content", content))
        for call in calls:
            if self._num_calls and not self._parallel:
                log.debug("dropping a second tool call (%s): parallel_tool_calls is false", call.name)
                continue
            self._num_calls += 1
            pieces.append(ReplyPiece("call", call=call))
        return pieces
