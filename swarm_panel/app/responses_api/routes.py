"""/v1/responses: OpenAI's Responses API as agents use it (Codex, the Agents SDK).

A request becomes a ChatCompletionRequest (instructions and input items as messages, function
tools, tool_choice, text.format as response_format) and runs the chat path; the reply's reasoning,
text and calls become output items. Responses are stored (app.responses_api.store) unless the request
says `store: false`, so a client may send only its new input with `previous_response_id`, or resend
the whole conversation as input items, as it must with `store: false`. Item references and the
Conversations API are not offered: they get a 400 saying so.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from swarm_panel.app.chat.request import ChatCompletionRequest, ReplyPiece
from swarm_panel.app.endpoint.chat_run import ChatRun, Choice
from swarm_panel.app.endpoint.engine_client import EngineClient, respond
from swarm_panel.app.endpoint.errors import APIError, bad_request
from swarm_panel.app.endpoint.wire import read_json, sse_event
from swarm_panel.app.responses_api.models import (
    ContentPartEvent,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    FunctionCallItem,
    IncompleteDetails,
    InputTokensDetails,
    MessageItem,
    OutputItem,
    OutputItemEvent,
    OutputTextDelta,
    OutputTextDone,
    ReasoningItem,
    ReasoningTextDelta,
    ReasoningTextDone,
    Response,
    ResponseError,
    ResponseEvent,
    ResponsesRequest,
    ResponseStatus,
    ResponsesUsage,
    TextItem,
)
from swarm_panel.app.responses_api.store import StoredResponse, listed_items, new_id, reply_messages
from swarm_panel.app.responses_api.tools import ToolTable, tool_table


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


def input_messages(body: ResponsesRequest, table: ToolTable) -> list[dict[str, Any]]:
    """The request's own input items as chat messages (its instructions apart)."""
    messages: list[dict[str, Any]] = []
    if isinstance(body.input, str):
        return [{"role": "user", "content": body.input}]
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
                    "function": {"name": table.model_name(item["name"], item.get("namespace")),
                                 "arguments": item.get("arguments") or "{}"}}
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
            continue  # chat templates drop earlier turns' thinking, so it is not replayed
        elif kind == "item_reference":
            raise bad_request("item references are not supported: name the response with previous_response_id, "
                              "or resend the items", param=param)
        else:
            raise bad_request(f"input items of type {kind!r} are not supported", param=f"{param}.type")
    return messages


def to_chat(body: ResponsesRequest, history: list[dict[str, Any]], table: ToolTable) -> ChatCompletionRequest:
    """`history` is the stored conversation that `previous_response_id` names, else empty."""
    turns = history + input_messages(body, table)
    if not turns:
        raise bad_request("input holds no messages", param="input")
    choice: Any = body.tool_choice
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise bad_request("tool_choice must be none, auto, required or {type: function, name}", param="tool_choice")
        choice = {"type": "function", "function": {"name": table.model_name(choice["name"], choice.get("namespace"))}}
    fmt = body.text.format if body.text and body.text.format else None
    response_format = None
    if fmt is not None and fmt.type != "text":
        response_format = {"type": fmt.type}
        if fmt.type == "json_schema":
            if fmt.schema_ is None:
                raise bad_request("text.format json_schema needs schema", param="text.format.schema")
            response_format["json_schema"] = {"name": fmt.name, "schema": fmt.schema_, "strict": fmt.strict}
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    chat = {
        "messages": system + turns, "tools": table.chat_tools or None, "tool_choice": choice,
        "parallel_tool_calls": body.parallel_tool_calls, "max_completion_tokens": body.max_output_tokens,
        # Only the knobs the client set: the others are the server's or the model's to choose (EngineClient.sampled).
        **{name: getattr(body, name) for name in ("temperature", "top_p") if name in body.model_fields_set},
        "presence_penalty": body.presence_penalty,
        # Codex names no user but keys its prompt cache by session: that is the agent.
        "user": body.user or body.prompt_cache_key, "frequency_penalty": body.frequency_penalty,
        "response_format": response_format,
    }
    return ChatCompletionRequest.model_validate({k: v for k, v in chat.items() if v is not None})


class ResponseWriter:
    """Output items built from reply pieces, and the stream events that announce them.

    The same writer makes the whole response and the stream, so both carry the same items.
    """

    def __init__(self, head: Response, table: ToolTable) -> None:
        self.head = head
        self.table = table
        self.items: list[OutputItem] = []
        self._open: TextItem | None = None
        self._seq = 0

    def response(self, status: ResponseStatus, **fields: Any) -> Response:
        return self.head.model_copy(update={"status": status, "output": list(self.items), **fields})

    def start(self) -> list[bytes]:
        created = self.response("in_progress")
        return [self._event(ResponseEvent, type="response.created", response=created),
                self._event(ResponseEvent, type="response.in_progress", response=created)]

    def in_progress(self) -> bytes:
        """response.in_progress again: a quiet stream's keep-alive, an event Codex's idle timer counts and
        every client already takes (comments reset no client's event timer)."""
        return self._event(ResponseEvent, type="response.in_progress", response=self.response("in_progress"))

    def add(self, pieces: list[ReplyPiece]) -> list[bytes]:
        events: list[bytes] = []
        for piece in pieces:
            if piece.kind == "call":
                events += self._close()
                call = piece.call
                namespace, name = self.table.named(call.name)
                item = FunctionCallItem(id=new_id("fc"), call_id=call.id, name=name, namespace=namespace)
                events += self._added(item)
                index = len(self.items) - 1
                events.append(self._event(FunctionCallArgumentsDelta, item_id=item.id, output_index=index,
                                          delta=call.arguments))
                item.arguments, item.status = call.arguments, "completed"
                events.append(self._event(FunctionCallArgumentsDone, item_id=item.id, output_index=index,
                                          name=name, arguments=call.arguments))
                events.append(self._event(OutputItemEvent, type="response.output_item.done", output_index=index,
                                          item=item))
                continue
            kind = ReasoningItem if piece.kind == "reasoning" else MessageItem
            if self._open is None and not piece.text.strip():
                continue  # blank text between items opens nothing
            if not isinstance(self._open, kind):
                events += self._close()
                events += self._open_item(kind)
            self._open.content[0].text += piece.text
            delta = ReasoningTextDelta if kind is ReasoningItem else OutputTextDelta
            events.append(self._event(delta, item_id=self._open.id, output_index=len(self.items) - 1,
                                      delta=piece.text))
        return events

    def finish(self, status: ResponseStatus, **fields: Any) -> list[bytes]:
        events = self._close()
        done = {"completed": "response.completed", "incomplete": "response.incomplete"}.get(status, "response.failed")
        return events + [self._event(ResponseEvent, type=done, response=self.response(status, **fields))]

    def _event(self, kind: type[BaseModel], **fields: Any) -> bytes:
        event = kind(sequence_number=self._seq, **fields)
        self._seq += 1
        return sse_event(event)

    def _added(self, item: OutputItem, shown: OutputItem | None = None) -> list[bytes]:
        self.items.append(item)
        return [self._event(OutputItemEvent, type="response.output_item.added", output_index=len(self.items) - 1,
                            item=shown or item)]

    def _open_item(self, kind: type[TextItem]) -> list[bytes]:
        item = kind(id=new_id("rs" if kind is ReasoningItem else "msg"))
        self._open = item
        events = self._added(item, item.model_copy(update={"content": []}))
        if isinstance(item, MessageItem):
            events.append(self._event(ContentPartEvent, type="response.content_part.added", item_id=item.id,
                                      output_index=len(self.items) - 1, part=item.content[0]))
        return events

    def _close(self) -> list[bytes]:
        item, self._open = self._open, None
        if item is None:
            return []
        index = len(self.items) - 1  # the open item is always the newest
        item.status = "completed"
        part = item.content[0]
        if isinstance(item, ReasoningItem):
            events = [self._event(ReasoningTextDone, item_id=item.id, output_index=index, text=part.text)]
        else:
            events = [self._event(OutputTextDone, item_id=item.id, output_index=index, text=part.text),
                      self._event(ContentPartEvent, type="response.content_part.done", item_id=item.id,
                                  output_index=index, part=part)]
        return events + [self._event(OutputItemEvent, type="response.output_item.done", output_index=index,
                                     item=item)]


def _usage(run: ChatRun) -> ResponsesUsage:
    usage = run.usage()
    return ResponsesUsage(input_tokens=usage["prompt_tokens"],
                          input_tokens_details=InputTokensDetails(
                              cached_tokens=usage["prompt_tokens_details"]["cached_tokens"]),
                          output_tokens=usage["completion_tokens"], total_tokens=usage["total_tokens"])


def _ending(finish_reason: str | None, error: str | None) -> tuple[ResponseStatus, dict[str, Any]]:
    if error is not None or finish_reason == "error":
        return "failed", {"error": ResponseError(message=error or "the engine failed")}
    if finish_reason == "length":
        return "incomplete", {"incomplete_details": IncompleteDetails()}
    return "completed", {}


def _stored(server: EngineClient, response_id: str) -> StoredResponse:
    stored = server.responses.get(response_id)
    if stored is None:
        raise APIError(404, f"no stored response {response_id!r}: it was created with store: false, deleted, "
                       "forgotten past the store's budget or before a restart", code="response_not_found")
    return stored


def responses_router(server: EngineClient) -> APIRouter:
    router = APIRouter()

    @router.post("/responses")
    async def create_response(request: Request):
        raw = await read_json(request, server.service.settings.max_body_bytes)
        body = ResponsesRequest.model_validate(raw)
        previous = None
        if body.previous_response_id:
            previous = server.responses.get(body.previous_response_id)
            if previous is None:
                raise bad_request(f"no stored response {body.previous_response_id!r} to follow: resend the "
                                  "conversation as input items", param="previous_response_id",
                                  code="previous_response_not_found")
        history = previous.conversation if previous else []
        table = tool_table(body.tools)
        # The sampling it runs with, the server's or the model's where the body names none, is what the
        # response says it ran with.
        chat = server.sampled(to_chat(body, history, table))
        run = await server.start_chat(chat, request)
        budget = int(server.service.settings.responses_store_mb * (1 << 20))
        fmt = body.text.format.model_dump(by_alias=True, exclude_none=True) if body.text and body.text.format else {"type": "text"}
        writer = ResponseWriter(Response(
            id=new_id("resp"), created_at=int(time.time()), model=server.model_id(), instructions=body.instructions,
            tools=body.tools or [], tool_choice=body.tool_choice or "auto",
            parallel_tool_calls=body.parallel_tool_calls is not False, temperature=chat.temperature,
            top_p=chat.top_p, max_output_tokens=body.max_output_tokens, text={"format": fmt},
            metadata=raw.get("metadata") or {}, previous_response_id=body.previous_response_id,
            store=body.store and budget > 0,
        ), table)

        def keep(response: Response) -> None:
            if response.store:
                conversation = history + input_messages(body, table) + reply_messages(writer.items, table)
                server.responses.put(StoredResponse.of(response, listed_items(body.input), conversation), budget)

        async def stream():
            for event in writer.start():
                yield event
            reason = error = None
            async for choice_event in run.events():
                for event in writer.add(choice_event.pieces):
                    yield event
                reason, error = choice_event.finish_reason or reason, choice_event.error or error
            status, fields = _ending(reason, error)
            events = writer.finish(status, usage=_usage(run), **fields)
            keep(writer.response(status, usage=_usage(run), **fields))
            for event in events:
                yield event

        def whole(choices: list[Choice]) -> JSONResponse:
            choice = choices[0]
            writer.add([ReplyPiece("reasoning", choice.reply.reasoning)] if choice.reply.reasoning else [])
            writer.add([ReplyPiece("content", choice.reply.content.strip())] if choice.reply.content.strip() else [])
            writer.add([ReplyPiece("call", call=c) for c in choice.reply.calls])
            status, fields = _ending(choice.finish_reason, choice.error)
            writer.finish(status, **fields)
            response = writer.response(status, usage=_usage(run), **fields)
            keep(response)
            return JSONResponse(response.model_dump())

        return await respond(request, run, stream() if body.stream else None, whole, heartbeat_s=server.heartbeat_s,
                             beat=writer.in_progress)

    @router.get("/responses/{response_id}")
    async def get_response(response_id: str):
        return JSONResponse(_stored(server, response_id).response.model_dump())

    @router.delete("/responses/{response_id}")
    async def delete_response(response_id: str):
        _stored(server, response_id)
        server.responses.delete(response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    @router.get("/responses/{response_id}/input_items")
    async def list_input_items(response_id: str, order: Literal["asc", "desc"] = "desc",
                               limit: int = Query(20, ge=1, le=100), after: str | None = None):
        items = _stored(server, response_id).input_items
        items = items if order == "asc" else items[::-1]
        if after is not None:
            ids = [item["id"] for item in items]
            if after not in ids:
                raise bad_request(f"no input item {after!r} in response {response_id!r}", param="after")
            items = items[ids.index(after) + 1:]
        page = items[:limit]
        return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit}

    return router
