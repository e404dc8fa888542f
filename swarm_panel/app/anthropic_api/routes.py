"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API (Claude Code, Anthropic SDKs).

The request becomes a ChatCompletionRequest (system, text blocks, tool_use as tool calls,
tool_result as tool messages) and runs the chat path; the reply becomes thinking, text and
tool_use blocks. Errors here are Anthropic-shaped (app.anthropic_api.errors).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from swarm_panel.app.anthropic_api.errors import AnthropicRoute
from swarm_panel.app.anthropic_api.models import (
    AnthropicUsage,
    ContentBlock,
    ContentBlockDelta,
    ContentBlockStart,
    ContentBlockStop,
    CountTokensRequest,
    ErrorDetail,
    InputJsonDelta,
    Message,
    MessageDelta,
    MessagesRequest,
    MessageStart,
    MessageStop,
    Ping,
    StopDetails,
    StopReason,
    StreamError,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolUseBlock,
)
from swarm_panel.app.chat.request import MAX_NAME_CHARS, ChatCompletionRequest, ReplyPiece
from swarm_panel.app.endpoint.chat_run import ChatRun, Choice
from swarm_panel.app.endpoint.engine_client import EngineClient, respond
from swarm_panel.app.endpoint.errors import bad_request
from swarm_panel.app.endpoint.wire import agent_from_scope, read_json, sse_event, with_subagent


def _text_blocks(blocks: list[dict[str, Any]] | str | None, param: str) -> str:
    if blocks is None or isinstance(blocks, str):
        return blocks or ""
    texts = []
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise bad_request(f"only text blocks are supported here, got {kind!r}", param=f"{param}.{i}")
        texts.append(block["text"])
    return "\n".join(texts)


# Claude Code's first system block: attribution for Anthropic's billing, not an instruction. Its
# cc_version suffix changes with the conversation's first message, and at the head of a ~21k-token
# prompt it would leave two sessions (or a session and its sub-agent) no shared prefix; dropped, the
# prompt the model sees is identical across them (llama.cpp PR #20623 made the same finding).
BILLING_HEADER = re.compile(r"x-anthropic-billing-header:[^\n]*")


def without_billing_header(system: list[dict[str, Any]] | str | None) -> list[dict[str, Any]] | str | None:
    """The system blocks less a text block that is only Claude Code's billing header line."""
    if not isinstance(system, list):
        return system
    return [b for b in system if not (isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
                                      and BILLING_HEADER.fullmatch(b["text"].strip()))]


def to_messages(body: MessagesRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    system = _text_blocks(without_billing_header(body.system), "system")
    if system:
        messages.append({"role": "system", "content": system})
    held: list[str] = []  # mid-conversation system text waiting for the next user turn
    for i, message in enumerate(body.messages):
        param = f"messages.{i}.content"
        if message.role == "system":
            # Many templates (Qwen3's among them) refuse a system turn after the first, so its text
            # joins the user turn it follows, else the next one.
            text = _text_blocks(message.content, param)
            last = messages[-1] if messages else None
            if last is not None and last["role"] in ("user", "system") and isinstance(last["content"], str):
                last["content"] = f"{last['content']}\n\n{text}" if last["content"] else text
            else:
                held.append(text)
            continue
        if isinstance(message.content, str):
            content = message.content
            if held and message.role == "user":
                content, held = "\n\n".join([*held, content]), []
            messages.append({"role": message.role, "content": content})
            continue
        texts, calls, results = [], [], []
        for j, block in enumerate(message.content):
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "tool_use" and message.role == "assistant":
                if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                    raise bad_request("a tool_use block needs id and name", param=f"{param}.{j}")
                calls.append({"id": block["id"], "type": "function",
                              "function": {"name": block["name"], "arguments": json.dumps(block.get("input") or {})}})
            elif kind == "tool_result" and message.role == "user":
                if not isinstance(block.get("tool_use_id"), str):
                    raise bad_request("a tool_result block needs tool_use_id", param=f"{param}.{j}")
                text = _text_blocks(block.get("content"), f"{param}.{j}.content")
                results.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                                "content": f"Error: {text}" if block.get("is_error") else text})
            elif kind in ("thinking", "redacted_thinking"):
                continue  # earlier thinking is not replayed to the model
            else:
                raise bad_request(f"{kind!r} blocks are not supported in {message.role} messages", param=f"{param}.{j}")
        # Tool results answer the previous assistant turn, so they come before this turn's text.
        messages += results
        if held and message.role == "user" and texts:
            texts, held = ["\n\n".join([*held, "\n".join(texts)])], []
        if texts or calls or not results:
            entry: dict[str, Any] = {"role": message.role, "content": "\n".join(texts)}
            if calls:
                entry["tool_calls"] = calls
            messages.append(entry)
    if held:
        messages.append({"role": "user", "content": "\n\n".join(held)})
    return messages


def to_chat(body: MessagesRequest, stream: bool) -> ChatCompletionRequest:
    choice = body.tool_choice
    tool_choice: Any = None
    if choice is not None:
        if choice.type == "tool" and not choice.name:
            raise bad_request("tool_choice type 'tool' needs name", param="tool_choice.name")
        tool_choice = {"auto": "auto", "any": "required", "none": "none"}.get(
            choice.type, {"type": "function", "function": {"name": choice.name}})
    chat = {
        "messages": to_messages(body),
        "tools": [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                    "parameters": t.input_schema}} for t in body.tools or []] or None,
        "tool_choice": tool_choice, "parallel_tool_calls": False if choice and choice.disable_parallel_tool_use else None,
        "max_tokens": body.max_tokens, "stop": body.stop_sequences or None, "stream": stream,
        # Only the knobs the client set: the others are the server's or the model's to choose (EngineClient.sampled).
        **{name: getattr(body, name) for name in ("temperature", "top_p", "top_k") if name in body.model_fields_set},
    }
    return ChatCompletionRequest.model_validate({k: v for k, v in chat.items() if v is not None})


def stop_reason(choice_reason: str | None, stop_sequence: str | None) -> StopReason:
    if choice_reason == "tool_calls":
        return "tool_use"
    if choice_reason == "length":
        return "max_tokens"
    return "stop_sequence" if stop_sequence else "end_turn"


def _usage(run: ChatRun) -> AnthropicUsage:
    usage = run.usage()
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    return AnthropicUsage(input_tokens=usage["prompt_tokens"] - cached, output_tokens=usage["completion_tokens"],
                          cache_read_input_tokens=cached)


class BlockWriter:
    """Content blocks from reply pieces, and the stream events that announce them."""

    def __init__(self) -> None:
        self.blocks: list[ContentBlock] = []
        self._open: ContentBlock | None = None

    @property
    def started(self) -> bool:
        return bool(self.blocks) or self._open is not None

    def add(self, pieces: list[ReplyPiece]) -> list[bytes]:
        events: list[bytes] = []
        for piece in pieces:
            if piece.kind == "call":
                events += self._close()
                call = piece.call
                block = ToolUseBlock(id=call.id, name=call.name)
                events.append(self._start(block))
                events.append(self._delta(InputJsonDelta(partial_json=call.arguments)))
                try:
                    block.input = json.loads(call.arguments)
                except ValueError:
                    block.input = {"arguments": call.arguments}
                events += self._close()
                continue
            thinking = piece.kind == "reasoning"
            if self._open is None and not piece.text.strip():
                continue  # blank text between blocks opens nothing
            block = self._open
            if not isinstance(block, ThinkingBlock if thinking else TextBlock):
                events += self._close()
                block = ThinkingBlock() if thinking else TextBlock()
                events.append(self._start(block))
            if isinstance(block, ThinkingBlock):
                block.thinking += piece.text
                events.append(self._delta(ThinkingDelta(thinking=piece.text)))
            else:
                block.text += piece.text
                events.append(self._delta(TextDelta(text=piece.text)))
        return events

    def finish(self) -> list[bytes]:
        return self._close()

    def _start(self, block: ContentBlock) -> bytes:
        self.blocks.append(block)
        self._open = block
        return sse_event(ContentBlockStart(index=len(self.blocks) - 1, content_block=block))

    def _delta(self, delta: TextDelta | ThinkingDelta | InputJsonDelta) -> bytes:
        return sse_event(ContentBlockDelta(index=len(self.blocks) - 1, delta=delta))

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        self._open = None
        return [sse_event(ContentBlockStop(index=len(self.blocks) - 1))]


def session_of(user_id: str | None) -> str | None:
    """Claude Code's user_id is a JSON object of device, account and session: its session is the agent."""
    if user_id and user_id.lstrip().startswith("{"):
        try:
            fields = json.loads(user_id)
        except ValueError:
            return user_id
        if isinstance(fields, dict) and isinstance(fields.get("session_id"), str) and fields["session_id"]:
            return fields["session_id"]
    return user_id


def anthropic_router(server: EngineClient) -> APIRouter:
    router = APIRouter(route_class=AnthropicRoute)

    def agent_for(body: MessagesRequest, request: Request) -> str | None:
        user = (agent_from_scope(request.scope) or request.headers.get("x-agent-name")
                or session_of(body.metadata.user_id if body.metadata else None))
        if not user or not user.strip():
            return None  # named as any request is (app.endpoint.engine_client.agent_of)
        return with_subagent(user.strip()[:MAX_NAME_CHARS], request.headers)

    @router.post("/messages")
    async def messages(request: Request):
        body = MessagesRequest.model_validate(await read_json(request, server.service.settings.max_body_bytes))
        # Claude Code asks for 32-64k tokens whatever the model: a reply gets what the context has left.
        run = await server.start_chat(to_chat(body, body.stream), request, agent_for(body, request))
        message = Message(id=f"msg_{uuid.uuid4().hex}", model=server.model_id())
        writer = BlockWriter()

        async def stream():
            started = message.model_copy(update={"usage": AnthropicUsage(input_tokens=run.prompt_tokens,
                                                                         output_tokens=0)})
            yield sse_event(MessageStart(message=started))
            yield sse_event(Ping())
            reason = error = None
            async for event in run.events():
                for chunk in writer.add(event.pieces):
                    yield chunk
                reason, error = event.finish_reason or reason, event.error or error
            for chunk in writer.finish():
                yield chunk
            if error is not None or reason == "error":
                # The error event, then the stream's proper end (as app.anthropic_api.errors.stream_end ends one).
                yield sse_event(StreamError(error=ErrorDetail(message=error or "the engine failed")))
                yield sse_event(MessageStop())
                return
            sequence = run.handles[0].request.stop_sequence
            yield sse_event(MessageDelta(delta=StopDetails(stop_reason=stop_reason(reason, sequence),
                                                           stop_sequence=sequence), usage=_usage(run)))
            yield sse_event(MessageStop())

        def whole(choices: list[Choice]) -> JSONResponse:
            choice = choices[0]
            reply = choice.reply
            writer.add([ReplyPiece("reasoning", reply.reasoning)] if reply.reasoning.strip() else [])
            writer.add([ReplyPiece("content", reply.content.strip())] if reply.content.strip() else [])
            writer.add([ReplyPiece("call", call=c) for c in reply.calls])
            writer.finish()
            whole_message = message.model_copy(update={
                "content": writer.blocks, "stop_reason": stop_reason(choice.finish_reason, choice.stop_sequence),
                "stop_sequence": choice.stop_sequence, "usage": _usage(run)})
            return JSONResponse(whole_message.model_dump())

        def beat() -> bytes:
            # Claude Code's watchdog counts events but skips pings, and hangs up a stream with none for
            # 5 minutes (it would send the whole prompt again); a message_delta that changes nothing
            # (no stop reason yet) is an event it counts. Once content flows, pings are enough.
            if writer.started:
                return sse_event(Ping())
            return sse_event(MessageDelta(delta=StopDetails(stop_reason=None, stop_sequence=None), usage=_usage(run)))

        return await respond(request, run, stream() if body.stream else None, whole, heartbeat_s=server.heartbeat_s,
                             beat=beat)

    @router.post("/messages/count_tokens")
    async def count_tokens(request: Request):
        body = CountTokensRequest.model_validate(await read_json(request, server.service.settings.max_body_bytes))
        engine, _ = server.engine()
        _, prompt_ids = await server.render_chat_request(engine, to_chat(body, False))
        return {"input_tokens": len(prompt_ids)}

    return router
