"""The endpoint: `create_app(service)` builds a FastAPI app around one SwarmService.

Routes: POST /v1/chat/completions, POST /v1/completions, POST /v1/responses (app.responses_api.routes),
POST /v1/messages and /v1/messages/count_tokens (app.anthropic_api.routes), GET /v1/models,
GET|PUT /v1/scheduler, GET /metrics, GET /health. No state lives at module level: two apps in one
process share nothing. Who may use which route: app.endpoint.access (a launched agent's key: inference only;
PUT /v1/scheduler: the panel's key only).

A request's path: read the body (capped), validate it, render the chat template, tokenize (off the
event loop when long), submit one runtime Request per choice to the engine thread (app.endpoint.submission),
then stream or collect their outputs. Everything a client can get wrong becomes a 4xx in the API's
own error shape (app.endpoint.errors).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response

from swarm_panel.app.anthropic_api.routes import anthropic_router
from swarm_panel.app.endpoint.access import ADMIN, INFERENCE, READ, guard
from swarm_panel.app.endpoint.agent_paths import AgentPaths
from swarm_panel.app.endpoint.chat_run import Choice
from swarm_panel.app.endpoint.errors import APIError, bad_request, install_error_handlers, read_json
from swarm_panel.app.endpoint.prom import CONTENT_TYPE, render
from swarm_panel.app.endpoint.request_records import record_error
from swarm_panel.app.endpoint.streaming import ChunkMaker, chat_stream, completion_stream
from swarm_panel.app.endpoint.submission import ServerCore, agent_of, respond
from swarm_panel.app.openai_api.logprobs import chat_logprobs, completion_logprobs
from swarm_panel.app.openai_api.models import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionChoice,
    CompletionChunk,
    CompletionRequest,
    ResponseFunction,
    ResponseMessage,
    ResponseToolCall,
    SchedulerUpdate,
    Usage,
)
from swarm_panel.app.responses_api.routes import responses_router
from swarm_panel.app.responses_api.store import ResponseStore
from swarm_panel.app.service.engine_service import SwarmService

log = logging.getLogger(__name__)


def chat_message(choice: Choice) -> ResponseMessage:
    reply = choice.reply
    calls = [ResponseToolCall(id=c.id, function=ResponseFunction(name=c.name, arguments=c.arguments))
             for c in reply.calls]
    # Beside calls or reasoning, blank content is no content; a plain reply is returned as generated.
    content = reply.content.strip() or None if calls or reply.reasoning else reply.content
    return ResponseMessage(content=content, reasoning_content=reply.reasoning.strip() or None, tool_calls=calls or None)


def create_app(service: SwarmService) -> FastAPI:
    """The FastAPI app for one service; the caller starts and stops the service itself."""
    server = ServerCore(service, ResponseStore())
    app = FastAPI(title="swarm-panel", summary="OpenAI- and Anthropic-compatible endpoint of a continuous-batching runtime",
                  version="0.1.0")
    app.state.server = server
    install_error_handlers(app, on_error=lambda request, error: record_error(service.requests, request, error))
    app.add_middleware(AgentPaths)
    if service.settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=service.settings.cors_origins, allow_methods=["*"],
                           allow_headers=["*"])

    guarded = [Depends(guard(service.agent_keys, INFERENCE))]
    reads = [Depends(guard(service.agent_keys, READ))]
    v1 = APIRouter(prefix="/v1", dependencies=guarded)

    @v1.post("/chat/completions")
    async def chat_completions(request: Request):
        body = ChatCompletionRequest.model_validate(await read_json(request, service.settings.max_body_bytes))
        run = await server.start_chat(body, request)
        model_id = server.model_id()
        response_id = f"chatcmpl-{uuid.uuid4().hex}"
        with_logprobs = body.top_logprobs_count is not None
        stream = None
        if body.stream:
            chunks = ChunkMaker(ChatCompletionChunk, response_id, model_id, body.include_usage)
            stream = chat_stream(run, chunks, with_logprobs)

        def whole(choices: list[Choice]) -> JSONResponse:
            result = ChatCompletion(
                id=response_id, created=int(time.time()), model=model_id, usage=Usage(**run.usage()),
                choices=[ChatChoice(index=c.index, message=chat_message(c), finish_reason=c.finish_reason,
                                    logprobs=chat_logprobs(c.logprobs) if with_logprobs else None)
                         for c in choices])
            return JSONResponse(result.model_dump())

        return await respond(request, run, stream, whole, heartbeat_s=server.heartbeat_s)

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
            echo = engine.tokenizer.detokenize(prompt_ids) if body.echo else ""
        run = await server.start_completion(request, engine, thread, body, prompt_ids, agent_of(body.user, request))
        model_id = server.facts(engine).model_id
        response_id = f"cmpl-{uuid.uuid4().hex}"
        with_logprobs = body.top_logprobs_count is not None
        stream = None
        if body.stream:
            chunks = ChunkMaker(CompletionChunk, response_id, model_id, body.include_usage)
            stream = completion_stream(run, chunks, echo, with_logprobs)

        def whole(choices: list[Choice]) -> JSONResponse:
            result = Completion(
                id=response_id, created=int(time.time()), model=model_id, usage=Usage(**run.usage()),
                choices=[CompletionChoice(index=c.index, text=echo + c.reply.content, finish_reason=c.finish_reason,
                                          logprobs=completion_logprobs(c.logprobs, len(echo)) if with_logprobs else None)
                         for c in choices])
            return JSONResponse(result.model_dump())

        return await respond(request, run, stream, whole, heartbeat_s=server.heartbeat_s)

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

    # Not under v1's own guard: an agent's key, good there, is refused here.
    control = APIRouter(prefix="/v1")

    @control.get("/scheduler", dependencies=reads)
    async def get_scheduler():
        _, thread = server.engine()
        return server.scheduler_state(thread)

    @control.put("/scheduler", dependencies=[Depends(guard(service.agent_keys, ADMIN))])
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
    app.include_router(control)
    app.include_router(responses_router(server), prefix="/v1", dependencies=guarded)
    app.include_router(anthropic_router(server), prefix="/v1", dependencies=guarded)

    @app.get("/metrics", dependencies=reads)
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
             "running": thread.num_running, "waiting": thread.num_waiting, "engine_errors": thread.error_count,
             "steps": thread.snapshot().step, "engine_busy_s": round(thread.busy_s, 3),
             "threads": engine.describe().get("n_threads")},
            status_code=200 if thread.alive else 503,
        )

    return app
