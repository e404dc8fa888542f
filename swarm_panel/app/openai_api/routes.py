"""OpenAI's routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models and /v1/models/{id}.

A request's path: read the body (capped, app.endpoint.wire), validate it, render the chat template and
tokenize (off the event loop when long), submit one runtime Request per choice through the engine client
(app.endpoint.engine_client), then stream (app.openai_api.stream) or collect their outputs. Everything a
client can get wrong becomes a 4xx in OpenAI's error shape (app.openai_api.errors).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from swarm_panel.app.chat.request import ChatCompletionRequest, CompletionRequest
from swarm_panel.app.endpoint.chat_run import Choice
from swarm_panel.app.endpoint.engine_client import EngineClient, respond
from swarm_panel.app.endpoint.errors import APIError, bad_request
from swarm_panel.app.endpoint.wire import agent_of, read_json
from swarm_panel.app.openai_api.errors import OpenAIRoute
from swarm_panel.app.openai_api.models import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    Completion,
    CompletionChoice,
    CompletionChunk,
    ResponseFunction,
    ResponseMessage,
    ResponseToolCall,
    Usage,
    chat_logprobs,
    completion_logprobs,
)
from swarm_panel.app.openai_api.stream import ChunkMaker, chat_stream, completion_stream
from swarm_panel.runtime.core.engine import engine_meta


def chat_message(choice: Choice) -> ResponseMessage:
    reply = choice.reply
    calls = [ResponseToolCall(id=c.id, function=ResponseFunction(name=c.name, arguments=c.arguments))
             for c in reply.calls]
    # Beside calls or reasoning, blank content is no content; a plain reply is returned as generated.
    content = reply.content.strip() or None if calls or reply.reasoning else reply.content
    return ResponseMessage(content=content, reasoning_content=reply.reasoning.strip() or None, tool_calls=calls or None)


def openai_router(server: EngineClient) -> APIRouter:
    """OpenAI's routes, mounted under /v1 by the server (app.server.app)."""
    v1 = APIRouter(route_class=OpenAIRoute)

    @v1.post("/chat/completions")
    async def chat_completions(request: Request):
        body = ChatCompletionRequest.model_validate(await read_json(request, server.service.settings.max_body_bytes))
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
        body = CompletionRequest.model_validate(await read_json(request, server.service.settings.max_body_bytes))
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
                "owned_by": "swarm-panel", "meta": engine_meta(engine)}

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

    return v1
