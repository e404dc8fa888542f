"""The OpenAI-compatible endpoint: `create_app(service)` builds a FastAPI app around one SwarmService.

Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET|PUT /v1/scheduler,
GET /metrics, GET /health. No state lives at module level: two apps in one process share nothing.

A request's path: read the body (capped), validate it, render the chat template, tokenize (off the
event loop when long), submit a runtime Request to the engine thread, then stream or collect its
outputs. Everything a client can get wrong becomes a 4xx in OpenAI's error shape (app.errors).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response

from app.api_models import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionRequest,
    Completion,
    CompletionChoice,
    CompletionRequest,
    ResponseFunction,
    ResponseMessage,
    ResponseToolCall,
    SchedulerUpdate,
    Usage,
    SamplingRequest,
)
from app.errors import APIError, bad_request, check_api_key, install_error_handlers, overloaded, read_json
from app.prom import CONTENT_TYPE, ServerMetrics, build_registry, render
from app.service import SwarmService
from app.streaming import (
    ChunkMaker,
    ClientGone,
    EventStreamResponse,
    RequestHandle,
    chat_stream,
    completion_stream,
    usage,
)
from app.tool_calls import ToolCallFormat, ToolCallStreamParser, detect_format, parse_tool_calls
from runtime.config import POLICY_NAMES
from runtime.engine import Engine
from runtime.engine_thread import EngineThread, EngineUnavailable
from runtime.request import Request as EngineRequest
from runtime.request import SamplingParams
from runtime.scheduler import RequestRejected

log = logging.getLogger(__name__)

# max_tokens when a request names none: the rest of the context, but no more than this.
DEFAULT_MAX_TOKENS = 4096
# Prompts longer than this (in characters) are rendered and tokenized on a worker thread.
OFF_LOOP_CHARS = 8192
MAX_AGENT_CHARS = 256

T = TypeVar("T")


@dataclass(slots=True)
class _EngineFacts:
    """What the server needs to know about the loaded engine, looked up once per engine."""

    engine: Engine
    model_id: str
    bos: list[int]
    n_vocab: int | None
    tool_format: ToolCallFormat


class OpenAIServer:
    """The state behind one app: the service, per-request metrics and the engine's cached facts."""

    def __init__(self, service: SwarmService) -> None:
        self.service = service
        self.metrics = ServerMetrics()
        self.registry = build_registry(service, self.metrics)
        self.created = int(time.time())
        self._facts: _EngineFacts | None = None

    # -- engine access -------------------------------------------------------------------------

    def engine(self) -> tuple[Engine, EngineThread]:
        try:
            return self.service.engine, self.service.engine_thread
        except RuntimeError:
            detail = f": {self.service.load_error}" if self.service.load_error else ""
            raise APIError(503, f"no model is loaded{detail}", code="model_not_loaded",
                           headers={"Retry-After": "5"}) from None

    def facts(self, engine: Engine) -> _EngineFacts:
        facts = self._facts
        if facts is None or facts.engine is not engine:
            described = engine.describe()
            n_vocab = described.get("n_vocab")
            facts = self._facts = _EngineFacts(
                engine=engine,
                model_id=str(described.get("name") or engine.name),
                bos=engine.tokenize("", add_special=True, parse_special=True),
                n_vocab=int(n_vocab) if n_vocab else None,
                tool_format=detect_format(engine.chat_template),
            )
        return facts

    def model_id(self) -> str:
        try:
            return self.facts(self.service.engine).model_id
        except RuntimeError:
            return ""

    def check_capacity(self, thread: EngineThread) -> None:
        limit = self.service.settings.max_waiting
        waiting = thread.num_waiting
        if waiting >= limit:
            self.metrics.reject()
            raise overloaded(f"the server is busy: {waiting} requests are waiting (limit {limit}); retry shortly")

    # -- prompts -------------------------------------------------------------------------------

    def check_prompt_chars(self, chars: int, param: str) -> None:
        limit = self.service.settings.max_prompt_chars
        if chars > limit:
            raise bad_request(f"the prompt is {chars} characters, more than the limit of {limit}",
                              param=param, code="context_length_exceeded")

    def tokenize(self, engine: Engine, text: str, param: str) -> list[int]:
        self.check_prompt_chars(len(text), param)
        ids = engine.tokenize(text, add_special=True, parse_special=True)
        bos = self.facts(engine).bos
        # A template that writes the BOS itself would get a second one from add_special.
        if bos and ids[: 2 * len(bos)] == bos + bos:
            ids = ids[len(bos):]
        if not ids:
            raise bad_request("the prompt is empty", param=param)
        return ids

    def render_chat(self, engine: Engine, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        try:
            text = engine.apply_chat_template(messages, tools)
        except Exception as exc:  # noqa: BLE001 - the template refused these messages: the client's to fix
            raise bad_request(f"the chat template could not render these messages: {exc}", param="messages") from None
        return self.tokenize(engine, text, "messages")

    async def off_loop_if_long(self, chars: int, fn: Callable[..., T], *args: Any) -> T:
        if chars > OFF_LOOP_CHARS:
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    # -- requests ------------------------------------------------------------------------------

    def submit(self, engine: Engine, thread: EngineThread, body: SamplingRequest, prompt_ids: list[int],
               agent: str) -> RequestHandle:
        facts = self.facts(engine)
        n_vocab = facts.n_vocab
        bias = body.bias_by_token
        if n_vocab is not None:
            bad = [t for t in bias if t >= n_vocab]
            if bad:
                raise bad_request(f"logit_bias names token {bad[0]}, outside the vocabulary (0..{n_vocab - 1})",
                                  param="logit_bias")
        limit = min(engine.max_context, thread.scheduler.kv_budget)
        room = limit - len(prompt_ids)
        if room < 1:
            raise bad_request(f"the prompt is {len(prompt_ids)} tokens; the context holds {limit}",
                              param="messages" if isinstance(body, ChatCompletionRequest) else "prompt",
                              code="context_length_exceeded")
        max_tokens = body.requested_max_tokens or min(DEFAULT_MAX_TOKENS, room)
        try:
            sampling = SamplingParams(
                max_tokens=max_tokens, temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
                min_p=body.min_p, seed=body.seed, logit_bias=bias, presence_penalty=body.presence_penalty,
                frequency_penalty=body.frequency_penalty, repeat_penalty=body.repeat_penalty,
                stop=body.stop_list, ignore_eos=body.ignore_eos,
            )
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        handle = RequestHandle(EngineRequest(prompt_ids, sampling, agent=agent), thread,
                               asyncio.get_running_loop(), self.metrics)
        try:
            handle.submit()
        except RequestRejected as exc:
            self.metrics.reject()
            param = "max_completion_tokens" if getattr(body, "max_completion_tokens", None) else "max_tokens"
            raise bad_request(str(exc), param=param, code="context_length_exceeded") from None
        except EngineUnavailable as exc:
            raise APIError(503, str(exc), code="engine_unavailable", headers={"Retry-After": "5"}) from None
        # Left again by run_request, when the response ends however it ends.
        self.service.inflight.enter(agent)
        return handle

    def scheduler_state(self, thread: EngineThread) -> dict[str, Any]:
        config = thread.config
        return {
            "policy": config.policy,
            "max_batch": config.max_batch,
            "prefill_chunk": config.prefill_chunk,
            "kv_budget": config.kv_budget,
            "admission_wait_s": config.admission_wait_s,
            "prefix_cache": config.prefix_cache,
            "policies": list(POLICY_NAMES),
            "lanes": [
                {"index": lane.index, "state": lane.state, "agent": lane.agent, "request_id": lane.request_id,
                 "prompt_tokens": lane.prompt_tokens, "computed_tokens": lane.computed_tokens,
                 "output_tokens": lane.output_tokens}
                for lane in thread.lanes()
            ],
            "waiting": thread.num_waiting,
            "running": thread.num_running,
        }


def agent_of(user: str | None, request: Request) -> str:
    name = (user or request.headers.get("x-agent-name") or "").strip()
    return name[:MAX_AGENT_CHARS] or "anonymous"


def engine_failure(handle: RequestHandle) -> APIError:
    message = handle.error or "the request failed in the engine"
    if "shutting down" in message:
        return APIError(503, message, code="engine_unavailable", headers={"Retry-After": "5"})
    return APIError(500, message, code="engine_error")


def _usage(handle: RequestHandle) -> Usage:
    return Usage(**usage(handle))


def create_app(service: SwarmService) -> FastAPI:
    """The FastAPI app for one service; the caller starts and stops the service itself."""
    server = OpenAIServer(service)
    app = FastAPI(title="swarm-panel", summary="OpenAI-compatible endpoint of a continuous-batching runtime",
                  version="0.1.0")
    app.state.server = server
    install_error_handlers(app)
    if service.settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=service.settings.cors_origins, allow_methods=["*"],
                           allow_headers=["*"])

    async def require_key(request: Request) -> None:
        key = service.settings.api_key
        check_api_key(key.get_secret_value() if key is not None else None, request.headers.get("authorization"))

    guarded = [Depends(require_key)]
    v1 = APIRouter(prefix="/v1", dependencies=guarded)

    async def run_request(request: Request, handle: RequestHandle, agent: str, stream_body, respond):
        """Streams (handing cleanup to the response) or collects, aborting on a hang-up either way."""
        if stream_body is not None:
            def close() -> None:
                handle.abort()
                service.inflight.exit(agent)
            return EventStreamResponse(stream_body, on_close=close)
        try:
            text = await handle.collect(request.is_disconnected)
        except ClientGone:
            return Response(status_code=499)
        finally:
            handle.abort()
            service.inflight.exit(agent)
        if handle.finish_reason == "error":
            raise engine_failure(handle)
        return respond(text)

    @v1.post("/chat/completions")
    async def chat_completions(request: Request):
        body = ChatCompletionRequest.model_validate(await read_json(request, service.settings.max_body_bytes))
        engine, thread = server.engine()
        server.check_capacity(thread)
        messages = [m.for_template() for m in body.messages]
        tools = body.template_tools()
        chars = sum(len(m["content"]) for m in messages) + (len(json.dumps(tools)) if tools else 0)
        server.check_prompt_chars(chars, "messages")
        prompt_ids = await server.off_loop_if_long(chars, server.render_chat, engine, messages, tools)
        agent = agent_of(body.user, request)
        handle = server.submit(engine, thread, body, prompt_ids, agent)
        facts = server.facts(engine)
        fmt = facts.tool_format if tools else None
        response_id = f"chatcmpl-{uuid.uuid4().hex}"
        stream_body = None
        if body.stream:
            chunks = ChunkMaker(response_id, facts.model_id, "chat.completion.chunk", body.include_usage)
            parser = ToolCallStreamParser(fmt) if fmt is not None else None
            stream_body = chat_stream(handle, chunks, request.is_disconnected, parser)

        def respond(text: str) -> JSONResponse:
            content: str | None = text
            calls = []
            if fmt is not None:
                content, calls = parse_tool_calls(text, fmt)
            reason = handle.finish_reason or "stop"
            if calls and reason == "stop":
                reason = "tool_calls"
            message = ResponseMessage(
                content=content,
                tool_calls=[ResponseToolCall(id=c.id, function=ResponseFunction(name=c.name, arguments=c.arguments))
                            for c in calls] or None,
            )
            result = ChatCompletion(id=response_id, created=int(time.time()), model=facts.model_id,
                                    choices=[ChatChoice(message=message, finish_reason=reason)], usage=_usage(handle))
            return JSONResponse(result.model_dump())

        return await run_request(request, handle, agent, stream_body, respond)

    @v1.post("/completions")
    async def completions(request: Request):
        body = CompletionRequest.model_validate(await read_json(request, service.settings.max_body_bytes))
        engine, thread = server.engine()
        server.check_capacity(thread)
        prompt = body.prompt
        if isinstance(prompt, list) and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            server.check_prompt_chars(len(prompt), "prompt")
            prompt_ids = await server.off_loop_if_long(len(prompt), server.tokenize, engine, prompt, "prompt")
            echo = prompt if body.echo else ""
        else:
            n_vocab = server.facts(engine).n_vocab
            if min(prompt) < 0 or (n_vocab is not None and max(prompt) >= n_vocab):
                top = f"0..{n_vocab - 1}" if n_vocab is not None else "non-negative"
                raise bad_request(f"prompt token ids must be within {top}", param="prompt")
            prompt_ids = list(prompt)
            echo = engine.detokenize(prompt_ids) if body.echo else ""
        agent = agent_of(body.user, request)
        handle = server.submit(engine, thread, body, prompt_ids, agent)
        model_id = server.facts(engine).model_id
        response_id = f"cmpl-{uuid.uuid4().hex}"
        stream_body = None
        if body.stream:
            chunks = ChunkMaker(response_id, model_id, "text_completion", body.include_usage)
            stream_body = completion_stream(handle, chunks, request.is_disconnected, echo)

        def respond(text: str) -> JSONResponse:
            result = Completion(id=response_id, created=int(time.time()), model=model_id,
                                choices=[CompletionChoice(text=echo + text, finish_reason=handle.finish_reason or "stop")],
                                usage=_usage(handle))
            return JSONResponse(result.model_dump())

        return await run_request(request, handle, agent, stream_body, respond)

    def model_card() -> dict[str, Any]:
        engine, _ = server.engine()
        return {"id": server.facts(engine).model_id, "object": "model", "created": server.created,
                "owned_by": "swarm-panel", "meta": engine.describe()}

    @v1.get("/models")
    async def models():
        return {"object": "list", "data": [model_card()]}

    @v1.get("/models/{model_id:path}")
    async def model(model_id: str):
        card = model_card()
        if model_id != card["id"]:
            raise APIError(404, f"no model {model_id!r} here; this server runs {card['id']!r}", param="model",
                           code="model_not_found")
        return card

    @v1.get("/scheduler")
    async def get_scheduler():
        _, thread = server.engine()
        return server.scheduler_state(thread)

    @v1.put("/scheduler")
    async def put_scheduler(request: Request):
        raw = await read_json(request, service.settings.max_body_bytes)
        if not isinstance(raw, dict):
            raise bad_request("the body must be a JSON object of scheduler settings")
        update = SchedulerUpdate.model_validate(raw)
        _, thread = server.engine()
        try:
            thread.reconfigure(**update.changes())
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        return server.scheduler_state(thread)

    app.include_router(v1)

    @app.get("/metrics", dependencies=guarded)
    async def metrics():
        return Response(render(server.registry), media_type=CONTENT_TYPE)

    @app.get("/health")
    async def health():
        try:
            engine, thread = service.engine, service.engine_thread
        except RuntimeError:
            return JSONResponse({"status": "unavailable", "error": service.load_error}, status_code=503)
        status = "ok" if thread.alive else "stopped"
        return JSONResponse(
            {"status": status, "model": server.facts(engine).model_id, "engine": engine.name,
             "running": thread.num_running, "waiting": thread.num_waiting, "engine_errors": thread.error_count},
            status_code=200 if thread.alive else 503,
        )

    return app
