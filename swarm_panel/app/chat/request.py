"""A chat (or completion) request as the endpoint core takes it: OpenAI's bodies, every field bounded.
Chat Completions and Completions arrive in these; the Responses and Anthropic APIs translate theirs
into a ChatCompletionRequest.

Request models ignore fields they do not know (clients send many), so an unknown option is never an
error; a known one out of range always is (a 400, never a 500). The upper bound of max_tokens is the
engine's context, which only the server knows: it is checked when the request is built.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swarm_panel.runtime.core.request import MAX_TOP_LOGPROBS

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
