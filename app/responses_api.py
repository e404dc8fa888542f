"""POST /v1/responses: OpenAI's Responses API as agents use it (Codex, the Agents SDK), stateless.

The request becomes a ChatCompletionRequest (instructions and input items as messages, function
tools, tool_choice, text.format as response_format) and runs the chat path; the reply's reasoning,
text and calls become output items. Nothing is stored: previous_response_id and item references get
a 400 saying so, and clients resend the conversation as input items, as they do with store=false.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import Field, field_validator

from app.api_models import (
    MAX_TOKENS_LIMIT,
    ChatCompletionRequest,
    PenaltyField,
    TemperatureField,
    TopPField,
    UserField,
    _Lenient,
)
from app.chat_run import ChatRun, Choice
from app.errors import APIError, bad_request, read_json
from app.reply import ReplyPiece
from app.server_core import ServerCore, respond
from app.streaming import ClientGone, sse


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
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    top_logprobs: int | None = None

    @field_validator("previous_response_id", "conversation")
    @classmethod
    def _stateless(cls, value: Any) -> Any:
        if value:
            raise ValueError("this server keeps no responses or conversations: resend the whole conversation as input items")
        return value

    @field_validator("top_logprobs")
    @classmethod
    def _no_logprobs(cls, value: int | None) -> int | None:
        if value:
            raise ValueError("logprobs are not offered on /v1/responses; use /v1/chat/completions")
        return value


def _text_of(content: Any, param: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise bad_request("content must be a string or a list of parts", param=param)
    texts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("input_text", "output_text", "text", "refusal") or not isinstance(part.get("text", part.get("refusal")), str):
            raise bad_request(f"only text content parts are supported, got {kind!r}", param=f"{param}.{i}")
        texts.append(part.get("text", part.get("refusal")))
    return "".join(texts)


def to_messages(body: ResponsesRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
    if isinstance(body.input, str):
        return messages + [{"role": "user", "content": body.input}]
    for i, item in enumerate(body.input):
        param = f"input.{i}"
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise bad_request(f"role must be user, assistant, system or developer, got {role!r}", param=f"{param}.role")
            messages.append({"role": role, "content": _text_of(item.get("content"), f"{param}.content")})
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not isinstance(item.get("call_id"), str):
                raise bad_request("a function_call item needs name and call_id", param=param)
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise bad_request("a function_call_output item needs call_id", param=param)
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": _text_of(item.get("output"), f"{param}.output")})
        elif kind == "reasoning":
            continue  # a stateless server does not replay earlier thinking
        elif kind == "item_reference":
            raise bad_request("item references need stored responses, which this server does not keep", param=param)
        else:
            raise bad_request(f"input items of type {kind!r} are not supported", param=f"{param}.type")
    if not messages:
        raise bad_request("input holds no messages", param="input")
    return messages


def to_chat(body: ResponsesRequest) -> ChatCompletionRequest:
    tools = []
    for i, tool in enumerate(body.tools or []):
        if tool.get("type") != "function":
            raise bad_request(f"only function tools are supported, got {tool.get('type')!r}", param=f"tools.{i}.type")
        tools.append({"type": "function", "function": {k: tool[k] for k in ("name", "description", "parameters")
                                                       if tool.get(k) is not None}})
    choice: Any = body.tool_choice
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise bad_request("tool_choice must be none, auto, required or {type: function, name}", param="tool_choice")
        choice = {"type": "function", "function": {"name": choice["name"]}}
    fmt = body.text.format if body.text and body.text.format else None
    response_format = None
    if fmt is not None and fmt.type != "text":
        response_format = {"type": fmt.type}
        if fmt.type == "json_schema":
            if fmt.schema_ is None:
                raise bad_request("text.format json_schema needs schema", param="text.format.schema")
            response_format["json_schema"] = {"name": fmt.name, "schema": fmt.schema_, "strict": fmt.strict}
    chat = {
        "messages": to_messages(body), "tools": tools or None, "tool_choice": choice,
        "parallel_tool_calls": body.parallel_tool_calls, "max_completion_tokens": body.max_output_tokens,
        "temperature": 1.0 if body.temperature is None else body.temperature,
        "top_p": 1.0 if body.top_p is None else body.top_p, "presence_penalty": body.presence_penalty,
        "frequency_penalty": body.frequency_penalty, "user": body.user, "response_format": response_format,
    }
    return ChatCompletionRequest.model_validate({k: v for k, v in chat.items() if v is not None})


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponseWriter:
    """Output items built from reply pieces, and the stream events that announce them.

    The same writer makes the whole response and the stream, so both carry the same items.
    """

    def __init__(self, base: dict[str, Any]) -> None:
        self.base = base
        self.items: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._seq = 0

    def event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return sse(payload, event=kind)

    def response(self, status: str, **fields: Any) -> dict[str, Any]:
        return {**self.base, "status": status, "output": self.items, **fields}

    def start(self) -> list[bytes]:
        created = self.response("in_progress")
        return [self.event("response.created", response=created), self.event("response.in_progress", response=created)]

    def add(self, pieces: list[ReplyPiece]) -> list[bytes]:
        events: list[bytes] = []
        for piece in pieces:
            if piece.kind == "call":
                events += self._close()
                call = piece.call
                item = {"type": "function_call", "id": _id("fc"), "call_id": call.id, "name": call.name,
                        "arguments": "", "status": "in_progress"}
                events += self._added(item)
                index = len(self.items) - 1
                events.append(self.event("response.function_call_arguments.delta", item_id=item["id"],
                                         output_index=index, delta=call.arguments))
                item.update(arguments=call.arguments, status="completed")
                events.append(self.event("response.function_call_arguments.done", item_id=item["id"],
                                         output_index=index, name=call.name, arguments=call.arguments))
                events.append(self.event("response.output_item.done", output_index=index, item=item))
                continue
            kind = "reasoning" if piece.kind == "reasoning" else "message"
            if self._open is None and not piece.text.strip():
                continue  # blank text between items opens nothing
            if self._open is None or self._open["type"] != kind:
                events += self._close()
                events += self._open_item(kind)
            part = self._open["content"][0]
            part["text"] += piece.text
            delta = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
            extra = {} if kind == "reasoning" else {"logprobs": []}
            events.append(self.event(delta, item_id=self._open["id"], output_index=len(self.items) - 1,
                                     content_index=0, delta=piece.text, **extra))
        return events

    def finish(self, status: str, **fields: Any) -> list[bytes]:
        events = self._close()
        done = {"completed": "response.completed", "incomplete": "response.incomplete"}.get(status, "response.failed")
        return events + [self.event(done, response=self.response(status, **fields))]

    def _added(self, item: dict[str, Any], shown: dict[str, Any] | None = None) -> list[bytes]:
        self.items.append(item)
        return [self.event("response.output_item.added", output_index=len(self.items) - 1, item=shown or dict(item))]

    def _open_item(self, kind: str) -> list[bytes]:
        if kind == "reasoning":
            item = {"type": "reasoning", "id": _id("rs"), "summary": [], "status": "in_progress",
                    "content": [{"type": "reasoning_text", "text": ""}]}
        else:
            item = {"type": "message", "id": _id("msg"), "status": "in_progress", "role": "assistant",
                    "content": [{"type": "output_text", "text": "", "annotations": [], "logprobs": []}]}
        self._open = item
        events = self._added(item, {**item, "content": []})
        if kind == "message":
            events.append(self.event("response.content_part.added", item_id=item["id"], output_index=len(self.items) - 1,
                                     content_index=0, part={**item["content"][0], "text": ""}))
        return events

    def _close(self) -> list[bytes]:
        item, self._open = self._open, None
        if item is None:
            return []
        index = len(self.items) - 1  # the open item is always the newest
        item["status"] = "completed"
        part = item["content"][0]
        if item["type"] == "reasoning":
            events = [self.event("response.reasoning_text.done", item_id=item["id"], output_index=index,
                                 content_index=0, text=part["text"])]
        else:
            events = [self.event("response.output_text.done", item_id=item["id"], output_index=index,
                                 content_index=0, text=part["text"], logprobs=[]),
                      self.event("response.content_part.done", item_id=item["id"], output_index=index,
                                 content_index=0, part=part)]
        return events + [self.event("response.output_item.done", output_index=index, item=item)]


def _usage(run: ChatRun) -> dict[str, Any]:
    usage = run.usage()
    return {"input_tokens": usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": usage["prompt_tokens_details"]["cached_tokens"]},
            "output_tokens": usage["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["total_tokens"]}


def _ending(finish_reason: str | None, error: str | None) -> tuple[str, dict[str, Any]]:
    if error is not None or finish_reason == "error":
        return "failed", {"error": {"code": "server_error", "message": error or "the engine failed"}}
    if finish_reason == "length":
        return "incomplete", {"incomplete_details": {"reason": "max_output_tokens"}}
    return "completed", {}


def responses_router(server: ServerCore) -> APIRouter:
    router = APIRouter()

    @router.post("/responses")
    async def create_response(request: Request):
        raw = await read_json(request, server.service.settings.max_body_bytes)
        body = ResponsesRequest.model_validate(raw)
        chat = to_chat(body)
        run = await server.start_chat(chat, request)
        fmt = body.text.format.model_dump(by_alias=True, exclude_none=True) if body.text and body.text.format else {"type": "text"}
        writer = ResponseWriter({
            "id": _id("resp"), "object": "response", "created_at": int(time.time()), "model": server.model_id(),
            "instructions": body.instructions, "tools": body.tools or [], "tool_choice": body.tool_choice or "auto",
            "parallel_tool_calls": body.parallel_tool_calls is not False, "temperature": chat.temperature,
            "top_p": chat.top_p, "max_output_tokens": body.max_output_tokens, "previous_response_id": None,
            "text": {"format": fmt}, "metadata": raw.get("metadata") or {}, "store": False, "error": None,
            "incomplete_details": None, "usage": None,
        })

        async def stream():
            for event in writer.start():
                yield event
            reason = error = None
            try:
                async for choice_event in run.events(request.is_disconnected):
                    for event in writer.add(choice_event.pieces):
                        yield event
                    reason, error = choice_event.finish_reason or reason, choice_event.error or error
            except ClientGone:
                return
            status, fields = _ending(reason, error)
            for event in writer.finish(status, usage=_usage(run), **fields):
                yield event

        def whole(choices: list[Choice]) -> JSONResponse:
            choice = choices[0]
            writer.add([ReplyPiece("reasoning", choice.reply.reasoning)] if choice.reply.reasoning else [])
            writer.add([ReplyPiece("content", choice.reply.content.strip())] if choice.reply.content.strip() else [])
            writer.add([ReplyPiece("call", call=c) for c in choice.reply.calls])
            status, fields = _ending(choice.finish_reason, choice.error)
            writer.finish(status, **fields)
            return JSONResponse(writer.response(status, usage=_usage(run), **fields))

        return await respond(request, run, stream() if body.stream else None, whole)

    @router.get("/responses/{response_id}")
    async def get_response(response_id: str):
        raise APIError(404, f"response {response_id!r} is not stored: this server keeps no responses",
                       code="response_not_found")

    return router
