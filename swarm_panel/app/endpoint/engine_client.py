"""What every endpoint shares: the loaded engine's facts, prompt rendering, and submitting choices.

Each API (chat, completions, Responses, Anthropic Messages) validates its own body, translates it
to a ChatCompletionRequest where it is a chat, and comes here: one path to the scheduler for all.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import Response

from swarm_panel.app.chat.reasoning import ThinkTags, starts_thinking, think_tags
from swarm_panel.app.chat.request import ChatCompletionRequest, ReplyParser, SamplingRequest, for_template
from swarm_panel.app.chat.tool_calls import ToolCallFormat, detect_format
from swarm_panel.app.endpoint.chat_run import RECORDED, ChatRun, Choice, OutputRouter, RequestHandle, run_record
from swarm_panel.app.endpoint.constrained import check_grammar, json_grammar, require_constraints, tool_call_grammar
from swarm_panel.app.endpoint.errors import APIError, bad_request, overloaded
from swarm_panel.app.endpoint.prom import ServerMetrics, StoredResponses, build_registry
from swarm_panel.app.endpoint.wire import (
    KEEPALIVE,
    ClientGone,
    EventStreamResponse,
    agent_of,
    check_name,
    priority_of,
    unless_hung_up,
    with_heartbeat,
)
from swarm_panel.app.service.agents import last_user_text
from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.app.settings.schema import scheduler_values
from swarm_panel.runtime.core.engine import Engine
from swarm_panel.runtime.core.request import Request as EngineRequest
from swarm_panel.runtime.core.request import SamplingParams
from swarm_panel.runtime.llama.facts import LlamaFacts
from swarm_panel.runtime.policies.registry import AGENT_POLICY_NAMES, BATCHING_POLICY_NAMES
from swarm_panel.runtime.scheduling.lanes import ContextExceeded, RequestRejected, Settled
from swarm_panel.runtime.serving.engine_core import EngineThread, EngineUnavailable

# Prompt tokens shown as "asked" in the panel's agent view when the API gives no plain user message.
ASKED_TAIL_TOKENS = 160
# Prompts longer than this (in characters) are rendered and tokenized on a worker thread.
OFF_LOOP_CHARS = 8192
MAX_AGENT_CHARS = 256

log = logging.getLogger(__name__)

T = TypeVar("T")
B = TypeVar("B", bound=SamplingRequest)


@dataclass(slots=True)
class _EngineFacts:
    """What the server needs to know about the loaded engine, looked up once per engine."""

    engine: Engine
    model_id: str
    bos: list[int]
    n_vocab: int | None
    tool_format: ToolCallFormat
    think: ThinkTags | None
    # What a request that leaves a sampling knob out gets (`sampled`): the server's default, else the model's.
    sampling: dict[str, float]


class EngineClient:
    """The state behind one app: the service, per-request metrics and the engine's cached facts."""

    def __init__(self, service: SwarmService, responses: StoredResponses) -> None:
        self.service = service
        self.metrics = ServerMetrics()
        # The latencies /metrics exports are the engine's own step figures, the ones the panel shows.
        service.metrics.subscribe(self.metrics.observe_step)
        # The Responses API's stored responses (responses_api.store), counted on /metrics.
        self.responses = responses
        self.registry = build_registry(service, self.metrics, self.responses)
        self.created = int(time.time())
        self._facts: _EngineFacts | None = None
        self._routers: dict[tuple[int, int], OutputRouter] = {}

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
            known = engine.facts
            n_vocab = known.n_vocab if isinstance(known, LlamaFacts) else None
            facts = self._facts = _EngineFacts(
                engine=engine,
                model_id=str(known.name or engine.name),
                bos=engine.tokenizer.tokenize("", add_special=True, parse_special=True),
                n_vocab=int(n_vocab) if n_vocab else None,
                tool_format=detect_format(engine.tokenizer.chat_template),
                think=think_tags(engine.tokenizer.chat_template),
                sampling=self._sampling_defaults(known.recommended()),
            )
        return facts

    def _sampling_defaults(self, recommended: dict[str, float]) -> dict[str, float]:
        settings = self.service.settings
        given = {"temperature": settings.default_temperature, "top_p": settings.default_top_p}
        defaults = {**recommended, **{name: value for name, value in given.items() if value is not None}}
        log.info("requests that name no sampling get %s",
                 ", ".join(f"{name} {value:g}" for name, value in defaults.items()) or "the API's defaults")
        return defaults

    def sampled(self, body: B) -> B:
        """The body with the sampling knobs it leaves out filled in: the server's default
        (--default-temperature, --default-top-p), else the model's recommended (its GGUF's
        general.sampling.* keys, or its card's), else the API's own default as the body has it."""
        engine, _ = self.engine()
        unset = {name: value for name, value in self.facts(engine).sampling.items()
                 if name not in body.model_fields_set}
        return body.model_copy(update=unset) if unset else body

    def _context_holds(self, engine: Engine, limit: int) -> str:
        """How much context a request may have, and, where split KV is what caps it, how to give it more:
        coding agents' first prompts (Codex's 9k tokens, Claude Code's 21k) pass a lane's default share."""
        facts = engine.facts
        n_ctx = self.service.settings.n_ctx
        if isinstance(facts, LlamaFacts) and not facts.kv_unified and limit == engine.max_context and limit < n_ctx:
            return (f"each lane's context holds {limit} (split KV: n_ctx {n_ctx} over {facts.max_lanes} "
                    "lanes); a bigger --n-ctx, a smaller --num-lanes or --kv-unified gives a request more")
        return f"the context holds {limit}"

    def router(self, thread: EngineThread) -> OutputRouter:
        """The router carrying this engine thread's outputs onto the running loop (one per pair)."""
        loop = asyncio.get_running_loop()
        key = (id(thread), id(loop))
        router = self._routers.get(key)
        if router is None or router.engine_thread is not thread or router.loop is not loop:
            for stale in [k for k, r in self._routers.items() if not r.usable]:
                self._routers.pop(stale).close()
            router = self._routers[key] = OutputRouter(thread, loop)
        return router

    @property
    def heartbeat_s(self) -> float:
        return self.service.settings.stream_heartbeat_s

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
        ids = engine.tokenizer.tokenize(text, add_special=True, parse_special=True)
        bos = self.facts(engine).bos
        # A template that writes the BOS itself would get a second one from add_special.
        if bos and ids[: 2 * len(bos)] == bos + bos:
            ids = ids[len(bos):]
        if not ids:
            raise bad_request("the prompt is empty", param=param)
        return ids

    def render_chat(self, engine: Engine, messages: list[dict[str, Any]],
                    tools: list[dict[str, Any]] | None) -> tuple[str, list[int]]:
        try:
            text = engine.tokenizer.apply_chat_template(messages, tools)
        except Exception as exc:  # noqa: BLE001 - the template refused these messages: the client's to fix
            raise bad_request(f"the chat template could not render these messages: {exc}", param="messages") from None
        return text, self.tokenize(engine, text, "messages")

    async def off_loop_if_long(self, chars: int, fn: Callable[..., T], *args: Any) -> T:
        if chars > OFF_LOOP_CHARS:
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    # -- requests ------------------------------------------------------------------------------

    async def submit_choices(self, engine: Engine, thread: EngineThread, body: SamplingRequest,
                             prompt_ids: list[int], agent: str, asked: str | None = None, grammar: str | None = None,
                             priority: int | None = None) -> tuple[list[RequestHandle], str | None]:
        """body.n requests for one prompt, queued together so the later ones copy the first one's prompt KV,
        and why max_tokens was cut, if it was."""
        if body.top_logprobs_count is not None:
            require_constraints(engine, "logprobs", "logprobs")
        settled = await self.admit(engine, thread, body, prompt_ids)
        handles: list[RequestHandle] = []
        try:
            for choice in range(body.n):
                handles.append(self.submit(engine, thread, body, prompt_ids, settled, agent, asked, grammar,
                                           choice, priority))
        except BaseException:
            for handle in handles:
                handle.abort()
                self.service.inflight.exit(agent)
            raise
        return handles, settled.note

    async def admit(self, engine: Engine, thread: EngineThread, body: SamplingRequest,
                    prompt_ids: list[int]) -> Settled:
        """The request's max_tokens, settled once on the engine's side (EngineThread.admit: past what
        is left, cut to it, the same on every endpoint), and why it was cut; a 400 where the prompt
        alone fills the context, and where it fits only once the engine widens its KV layout, the
        widening awaited first, so that one llama.cpp cannot make (memory, on a card) is a 400 too."""
        try:
            settled, widening = thread.admit(len(prompt_ids), body.requested_max_tokens,
                                             default_max_tokens=self.service.settings.default_max_tokens)
        except ContextExceeded as exc:
            raise bad_request(f"the prompt is {len(prompt_ids)} tokens; {self._context_holds(engine, exc.limit)}",
                              param="messages" if isinstance(body, ChatCompletionRequest) else "prompt",
                              code="context_length_exceeded") from None
        except RequestRejected as exc:
            self.metrics.reject()
            param = "max_completion_tokens" if getattr(body, "max_completion_tokens", None) else "max_tokens"
            raise bad_request(str(exc), param=param, code="context_length_exceeded") from None
        except EngineUnavailable as exc:
            raise APIError(503, str(exc), code="engine_unavailable", headers={"Retry-After": "5"}) from None
        failure = await asyncio.wrap_future(widening) if widening is not None else None
        if failure is not None:
            raise bad_request(f"the prompt is {len(prompt_ids)} tokens, max_tokens {settled.max_tokens}; "
                              f"{self._context_holds(engine, engine.max_context)}, and {failure}",
                              code="context_length_exceeded")
        return settled

    def submit(self, engine: Engine, thread: EngineThread, body: SamplingRequest, prompt_ids: list[int],
               settled: Settled, agent: str, asked: str | None = None, grammar: str | None = None, choice: int = 0,
               priority: int | None = None) -> RequestHandle:
        """One choice, with the max_tokens `admit` settled."""
        facts = self.facts(engine)
        n_vocab = facts.n_vocab
        bias = body.bias_by_token
        if n_vocab is not None:
            bad = [t for t in bias if t >= n_vocab]
            if bad:
                raise bad_request(f"logit_bias names token {bad[0]}, outside the vocabulary (0..{n_vocab - 1})",
                                  param="logit_bias")
        try:
            sampling = SamplingParams(
                max_tokens=settled.max_tokens, temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
                min_p=body.min_p, seed=None if body.seed is None else body.seed + choice, logit_bias=bias,
                presence_penalty=body.presence_penalty, frequency_penalty=body.frequency_penalty,
                repeat_penalty=body.repeat_penalty, stop=body.stop_list, ignore_eos=body.ignore_eos,
                grammar=grammar, logprobs=body.top_logprobs_count,
            )
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        handle = RequestHandle(EngineRequest(prompt_ids, sampling, agent=agent, priority=priority),
                               self.router(thread), self.metrics)
        try:
            handle.submit(settled)
        except EngineUnavailable as exc:
            raise APIError(503, str(exc), code="engine_unavailable", headers={"Retry-After": "5"}) from None
        # Left again when the response ends however it ends (ChatRun.close).
        self.service.inflight.enter(agent)
        if asked is None:  # the prompt's tail says what the agent asks, whatever API it came through
            asked = engine.tokenizer.detokenize(prompt_ids[-ASKED_TAIL_TOKENS:])
        self.service.activity.began(agent, handle.request, asked, facts.tool_format)
        return handle

    async def render_chat_request(self, engine: Engine, body: ChatCompletionRequest) -> tuple[str, list[int]]:
        """The prompt a chat request becomes: text and token ids."""
        messages = [m.for_template() for m in body.messages]
        tools = body.template_tools()
        shown_messages, shown_tools = for_template(messages, tools, self.facts(engine).tool_format)
        chars = sum(len(m["content"] or "") for m in shown_messages) + (len(json.dumps(tools)) if tools else 0)
        self.check_prompt_chars(chars, "messages")
        return await self.off_loop_if_long(chars, self.render_chat, engine, shown_messages, shown_tools)

    async def start_chat(self, body: ChatCompletionRequest, request: Request, agent: str | None = None) -> ChatRun:
        """Renders, constrains and submits a chat; every chat-shaped API comes through here."""
        started = time.monotonic()
        engine, thread = self.engine()
        self.check_capacity(thread)
        facts = self.facts(engine)
        body = self.sampled(body)
        grammar = chat_grammar(engine, body, facts.tool_format)
        text, prompt_ids = await self.render_chat_request(engine, body)
        agent = agent or agent_of(body.user, request)
        check_name(request.scope, agent)
        declared = {t.function.name: t.function.parameters or {} for t in body.tools or []} if body.template_tools() else None
        thinking = facts.think is not None and starts_thinking(text, facts.think)
        parsers = [ReplyParser(facts.tool_format if declared is not None else None, declared,
                               body.parallel_tool_calls is not False, facts.think, thinking) for _ in range(body.n)]
        asked = last_user_text([m.for_template() for m in body.messages])
        handles, note = await self.submit_choices(engine, thread, body, prompt_ids, agent, asked, grammar,
                                                  priority_of(request))
        return ChatRun(handles, parsers, on_close=lambda _: self.service.inflight.exit(agent), note=note,
                       on_end=self.recorder(request, agent), started=started)

    async def start_completion(self, request: Request, engine: Engine, thread: EngineThread, body: SamplingRequest,
                               prompt_ids: list[int], agent: str) -> ChatRun:
        started = time.monotonic()
        check_name(request.scope, agent)
        body = self.sampled(body)
        grammar = None
        if body.grammar is not None:
            require_constraints(engine, "a grammar", "grammar")
            check_grammar(body.grammar)
            grammar = body.grammar
        handles, note = await self.submit_choices(engine, thread, body, prompt_ids, agent, grammar=grammar,
                                                  priority=priority_of(request))
        return ChatRun(handles, [ReplyParser() for _ in handles], on_close=lambda _: self.service.inflight.exit(agent),
                       note=note, on_end=self.recorder(request, agent), started=started)

    def recorder(self, request: Request, agent: str) -> Callable[[ChatRun], None]:
        """Writes the run's line to the request log when it ends; the error handlers then leave it be."""
        def record(run: ChatRun) -> None:
            request.scope[RECORDED] = True
            self.service.requests.record(run_record(run, agent, request.url.path))
        return record

    def scheduler_state(self, thread: EngineThread) -> dict[str, Any]:
        config = thread.config
        return {
            **scheduler_values(config),
            # The seed's batching policies, and the agent-aware ones built on continuous batching.
            "policies": list(BATCHING_POLICY_NAMES),
            "agent_policies": list(AGENT_POLICY_NAMES),
            "agent_weights": dict(config.agent_weights),
            "agent_priorities": dict(config.agent_priorities),
            "lanes": [
                {"index": lane.index, "state": lane.state, "agent": lane.agent, "request_id": lane.request_id,
                 "prompt_tokens": lane.prompt_tokens, "computed_tokens": lane.computed_tokens,
                 "output_tokens": lane.output_tokens}
                for lane in thread.lanes()
            ],
            "waiting": thread.num_waiting,
            "running": thread.num_running,
        }


# Why the server changed what the request asked (a max_tokens cut to what the context has left).
NOTE_HEADER = "X-Swarm-Panel-Note"


def engine_failure(message: str | None) -> APIError:
    message = message or "the request failed in the engine"
    if "shutting down" in message:
        return APIError(503, message, code="engine_unavailable", headers={"Retry-After": "5"})
    return APIError(500, message, code="engine_error")


def chat_grammar(engine: Engine, body: ChatCompletionRequest, fmt: ToolCallFormat) -> str | None:
    """The one constraint a chat asks for: its own grammar, a forced tool call, or JSON output."""
    fmt_type = body.response_format.type if body.response_format else "text"
    asked = [name for name, on in (("grammar", body.grammar is not None), ("tool_choice", body.forces_tool_call),
                                   ("response_format", fmt_type != "text")) if on]
    if not asked:
        return None
    if len(asked) > 1:
        raise bad_request(f"{' and '.join(asked)} each constrain the output; send one of them", param=asked[1])
    require_constraints(engine, f"constrained output ({asked[0]})", asked[0])
    if body.grammar is not None:
        check_grammar(body.grammar)
        return body.grammar
    if body.forces_tool_call:
        return tool_call_grammar([t["function"] for t in body.template_tools() or []], fmt)
    schema = body.response_format.json_schema.schema_ if fmt_type == "json_schema" else None
    return json_grammar(schema, "response_format")


async def respond(request: Request, run: ChatRun, stream: AsyncIterator[bytes] | None,
                  whole: Callable[[list[Choice]], Response], *, heartbeat_s: float,
                  beat: Callable[[], bytes] = lambda: KEEPALIVE) -> Response:
    """Streams (the response closes the run when it ends; `beat()` goes out whenever it is quiet for
    `heartbeat_s`) or collects; a hang-up aborts either way."""
    headers = {NOTE_HEADER: run.note} if run.note else None
    if stream is not None:
        return EventStreamResponse(with_heartbeat(stream, heartbeat_s, beat), on_close=run.close, headers=headers)
    try:
        choices = await unless_hung_up(request.receive, run.collect())
    except ClientGone:
        return Response(status_code=499)
    finally:
        run.close()
    failed = next((c for c in choices if c.finish_reason == "error"), None)
    if failed is not None:
        raise engine_failure(failed.error)
    response = whole(choices)
    response.headers.update(headers or {})
    return response
