"""The gateway's HTTP face: every POST under /v1 is forwarded, body untouched, to the backend admitted.

So whatever the backends speak (/v1/chat/completions, /v1/completions, /v1/responses, /v1/messages)
works through it. Streams are relayed as they arrive; a client's hang-up closes the upstream request,
which the backend sees as its own client leaving. A backend failing before it answered is retried
on another; failing mid-answer ends that one response with an error event (or a 502) and nothing else.
A Responses API request naming a stored response goes to the backend that answered it, and GET and
DELETE of /v1/responses/{id} (and its input_items) are forwarded there too. Also served: /health,
/metrics (the gateway's figures per backend and agent), GET/PUT /v1/scheduler (gateway policy and
routing), GET /v1/models (the first backend that is up). Keys as the server's (app.endpoint.wire): PUT
/v1/scheduler needs the panel's key (the user's --api-key, else the one the gateway made and published).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable

import anyio
import httpx
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from swarm_panel.app.anthropic_api import errors as anthropic_errors
from swarm_panel.app.endpoint.errors import APIError, bad_request, install_error_handlers
from swarm_panel.app.endpoint.prom import CONTENT_TYPE, render
from swarm_panel.app.endpoint.wire import (
    ADMIN,
    INFERENCE,
    KEEPALIVE,
    READ,
    ClientGone,
    EventStreamResponse,
    guard,
    read_body,
    read_json,
    relayed_with_heartbeat,
    unless_hung_up,
)
from swarm_panel.app.gateway.admission import Gateway, Lease
from swarm_panel.app.gateway.prom import build_gateway_registry
from swarm_panel.app.gateway.request_facts import Inbound, UsageTap, forwarded_body, inspect, prompt_usage, response_id
from swarm_panel.app.openai_api import errors as openai_errors
from swarm_panel.app.responses_api import errors as responses_errors
from swarm_panel.app.service.agents import AgentKeys
from swarm_panel.app.settings.schema import Settings

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
# Generous: a long prompt's prefill can keep a backend silent for minutes; a hang-up still ends it at once.
READ_TIMEOUT_S = 600.0
# Errors raised before the backend received the request: safe to send it elsewhere.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
PING = b'event: ping\ndata: {"type":"ping"}\n\n'  # Anthropic's keep-alive event


def _error_message(body: bytes) -> str:
    """The message of an error body in either API's shape, else the body's start."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError, UnicodeDecodeError):
        error = None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    return body[:200].decode(errors="replace") or "no body"


def _beat(path: str) -> bytes:
    """A keep-alive in the stream's own shape. A relayed Responses stream gets a comment, not a repeated
    response.in_progress, whose sequence number would clash with the backend's."""
    return PING if path.endswith("/messages") else KEEPALIVE


def _error_event(path: str, status: int, message: str, tap: UsageTap | None = None) -> bytes:
    """The end of a stream the gateway already answered 200: the error event and proper end of the API the path
    speaks, typed by who failed (a backend's death: 502)."""
    if "/messages" in path:
        return anthropic_errors.stream_end(status, message)
    if "/responses" in path:
        if tap is None:
            return responses_errors.stream_end(status, message)
        return responses_errors.stream_end(status, message, response_id=tap.response_id,
                                           sequence_number=tap.next_sequence, model=tap.model or "")
    return openai_errors.stream_end(status, message, code="backend_failed" if status >= 500 else None)


def _whole_events(pending: bytes) -> tuple[bytes, bytes]:
    """`pending` cut after its last complete event: what may go on, and the rest, which waits for more."""
    end = max((at + len(sep) for sep in (b"\n\n", b"\r\n\r\n", b"\r\r") if (at := pending.rfind(sep)) >= 0),
              default=0)
    return pending[:end], pending[end:]


class Forwarder:
    def __init__(self, gateway: Gateway, heartbeat_s: Callable[[], float] = lambda: 0.0) -> None:
        self.gateway = gateway
        self.heartbeat_s = heartbeat_s
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
                                        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))

    async def close(self) -> None:
        await self.client.aclose()

    async def forward(self, request: Request, path: str, inbound: Inbound) -> Response:
        """Relays the request to the backend admitted. A streamed request with no answer after a heartbeat,
        still queued here or sent to a backend that has yet to answer, gets its stream at once, and any
        stream quiet for a heartbeat gets keep-alives: llama-server and vLLM send nothing while a prompt
        waits or computes, and the client's idle watchdog would give up and resend it."""
        every_s = self.heartbeat_s() if inbound.stream else 0.0
        answering = asyncio.ensure_future(self._admit_and_send(request, path, inbound))
        try:
            await unless_hung_up(request.receive, asyncio.wait({answering}, timeout=every_s or None))
        except BaseException:
            answering.cancel()
            raise
        if not answering.done():
            return EventStreamResponse(self._late(path, answering, every_s), on_close=answering.cancel)
        upstream, lease = answering.result()
        return await self._relay(request, path, lease, upstream, every_s)

    async def _admit_and_send(self, request: Request, path: str, inbound: Inbound) -> tuple[httpx.Response, Lease]:
        return await self._send(request, path, inbound, await self.gateway.acquire(inbound))

    async def _send(self, request: Request, path: str, inbound: Inbound, lease: Lease) -> tuple[httpx.Response, Lease]:
        """Sends to the lease's backend; one that refuses the connection is left for another."""
        gateway = self.gateway
        attempts = len(gateway.backends)
        while True:
            backend = lease.backend
            headers = {"content-type": "application/json", **backend.headers}
            if inbound.agent != "anonymous":
                headers["x-agent-name"] = inbound.agent
            upstream_request = self.client.build_request(
                "POST", f"{backend.config.url}{path}", content=forwarded_body(inbound, backend.kind), headers=headers,
                params=request.query_params)
            try:
                return await self.client.send(upstream_request, stream=True), lease
            except NOT_SENT as exc:
                log.warning("backend %s refused a request (%s); trying another", backend.label, exc)
                gateway.backend_failed(lease, f"connection failed: {exc}")
            except httpx.HTTPError as exc:
                gateway.backend_failed(lease, f"failed before answering: {exc}")
                raise self._failed(backend.label, exc) from None
            except BaseException:
                gateway.release(lease)
                raise
            attempts -= 1
            if attempts == 0:
                raise APIError(503, "every backend refused the connection; retry shortly", code="no_backend",
                               headers={"Retry-After": "2"})
            lease = await gateway.acquire(inbound, lease.ticket)

    async def _late(self, path: str, answering: asyncio.Future[tuple[httpx.Response, Lease]],
                    every_s: float) -> AsyncIterator[bytes]:
        """The stream of a request answered late: keep-alives while it waits, then the backend's stream, or
        its error as an error event (the 200 is already sent)."""
        beat = _beat(path)
        while not answering.done():
            await asyncio.wait({answering}, timeout=every_s)
            if not answering.done():
                yield beat
        try:
            upstream, lease = answering.result()
        except APIError as exc:
            yield _error_event(path, exc.status, exc.message)
            return
        content_type = upstream.headers.get("content-type", "")
        if upstream.status_code == 200 and content_type.startswith("text/event-stream"):
            try:
                async with contextlib.aclosing(self._stream(path, lease, upstream, every_s)) as relayed:
                    async for chunk in relayed:
                        yield chunk
            finally:
                self.gateway.release(lease)
            return
        try:
            body = await upstream.aread()
        except httpx.HTTPError as exc:
            self.gateway.backend_failed(lease, f"failed mid-answer: {exc}")
            body = b""
        finally:
            await upstream.aclose()
            self.gateway.release(lease)
        # Its 4xx is the client's fault; anything else that is not a stream (a 5xx, a 200 of JSON) the backend's.
        status = upstream.status_code if 400 <= upstream.status_code < 500 else 502
        yield _error_event(path, status, f"backend {lease.backend.label} answered {upstream.status_code}: "
                                         f"{_error_message(body)}")

    def _failed(self, label: str, exc: Exception) -> APIError:
        return APIError(502, f"backend {label} failed mid-request ({type(exc).__name__}: {exc}); retry",
                        code="backend_failed")

    async def _relay(self, request: Request, path: str, lease: Lease, upstream: httpx.Response,
                     every_s: float) -> Response:
        backend = lease.backend
        relay_headers = {"x-swarm-backend": backend.label}
        content_type = upstream.headers.get("content-type", "application/json")
        if upstream.status_code == 200 and content_type.startswith("text/event-stream"):
            response = EventStreamResponse(self._stream(path, lease, upstream, every_s),
                                           on_close=lambda: self.gateway.release(lease))
            response.headers.update(relay_headers)
            return response
        try:
            body = await unless_hung_up(request.receive, upstream.aread())
        except ClientGone:
            return Response(status_code=499)
        except httpx.HTTPError as exc:
            self.gateway.backend_failed(lease, f"failed mid-answer: {exc}")
            raise self._failed(backend.label, exc) from None
        finally:
            await upstream.aclose()
            self.gateway.release(lease)
        if upstream.status_code == 200:
            try:
                payload = json.loads(body)
            except ValueError:
                payload = None
            counts = prompt_usage(payload)
            if counts is not None:
                backend.note_response(*counts)
            stored = response_id(payload)
            if stored is not None:
                self.gateway.response_homes.note(stored, backend.label)
        return Response(body, status_code=upstream.status_code, media_type=content_type, headers=relay_headers)

    async def _stream(self, path: str, lease: Lease, upstream: httpx.Response,
                      every_s: float) -> AsyncIterator[bytes]:
        tap = UsageTap()
        backend = lease.backend
        noted = False
        # Only whole events go on: a backend dying mid-event must not leave the client half a JSON line
        # before the error event, which its SDK would take for a protocol error.
        pending = b""
        chunks = relayed_with_heartbeat(upstream.aiter_raw(), every_s, _beat(path))
        try:
            async for chunk in chunks:
                tap.feed(chunk)
                if not noted and tap.response_id is not None:
                    # Noted at response.created, so a follow-up sent the moment the stream ends finds it.
                    self.gateway.response_homes.note(tap.response_id, backend.label)
                    noted = True
                whole, pending = _whole_events(pending + chunk)
                if whole:
                    yield whole
            if pending:
                yield pending
        except httpx.HTTPError as exc:
            log.warning("backend %s failed mid-stream: %s", backend.label, exc)
            self.gateway.backend_failed(lease, f"failed mid-stream: {exc}")
            yield _error_event(path, 502, f"backend {backend.label} failed mid-stream ({type(exc).__name__}); "
                                          "this response is incomplete, retry it", tap)
        finally:
            # On a hang-up this runs as the stream is cancelled (Starlette's anyio scope cancels again at
            # every await, hence the shield) or closed. The keep-alives' read of the backend, under way
            # in a task of its own, ends first: closing the response while it reads would leave the
            # backend's request running.
            with anyio.CancelScope(shield=True):
                await chunks.aclose()
                await upstream.aclose()
            if tap.found is not None:
                backend.note_response(*tap.found)


    async def stored_response(self, request: Request, stored_id: str) -> Response:
        """GET or DELETE of a stored response: from the backend that answered it, else the first that has it."""
        home = self.gateway.response_homes.home(stored_id)
        holders = [b for b in self.gateway.backends if b.available and home in (None, b.label)]
        for backend in holders:
            try:
                answer = await unless_hung_up(request.receive, self.client.request(
                    request.method, f"{backend.config.url}{request.url.path}", params=request.query_params,
                    headers=backend.headers, timeout=CONNECT_TIMEOUT_S))
            except httpx.HTTPError as exc:
                log.warning("backend %s failed to answer for response %s: %s", backend.label, stored_id, exc)
                continue
            if answer.status_code != 404:
                return Response(answer.content, status_code=answer.status_code, headers={"x-swarm-backend": backend.label},
                                media_type=answer.headers.get("content-type", "application/json"))
        raise APIError(404, f"no backend holds response {stored_id!r}", code="response_not_found")


def create_gateway_app(gateway: Gateway, settings: Settings | Callable[[], Settings],
                       keys: AgentKeys | None = None) -> FastAPI:
    """settings may be a callable: the panel's API key can change while its gateway runs. `keys`: the panel's
    (its launched agents may use the gateway for inference, never steer it); None: the gateway's own."""
    current = settings if callable(settings) else lambda: settings
    if keys is None:
        keys = AgentKeys(lambda: current().api_key.get_secret_value() if current().api_key else None)
    app = FastAPI(title="swarm-panel gateway", summary="One OpenAI-compatible endpoint in front of many engines",
                  version="0.1.0")
    forwarder = Forwarder(gateway, lambda: current().stream_heartbeat_s)
    registry = build_gateway_registry(gateway)
    app.state.gateway = gateway
    app.state.forwarder = forwarder
    app.state.keys = keys
    install_error_handlers(app, openai_errors.OpenAIRoute.error_json,
                           {anthropic_errors.MESSAGES_PREFIX: anthropic_errors.AnthropicRoute.error_json})

    guarded = [Depends(guard(keys, INFERENCE))]
    reads = [Depends(guard(keys, READ))]
    v1 = APIRouter(prefix="/v1", dependencies=guarded)
    # Not under v1's own guard: an agent's key, good there, is refused here.
    control = APIRouter(prefix="/v1")

    @control.get("/scheduler", dependencies=reads)
    async def get_scheduler():
        return gateway.state()

    @control.put("/scheduler", dependencies=[Depends(guard(keys, ADMIN))])
    async def put_scheduler(request: Request):
        raw = await read_json(request, current().max_body_bytes)
        if not isinstance(raw, dict) or not set(raw) <= {"policy", "routing"} or not raw:
            raise bad_request('the body must be {"policy": "first-come"|"fewest-in-flight"} and/or '
                              '{"routing": "affinity"|"round-robin"}')
        try:
            if "policy" in raw:
                gateway.set_policy(str(raw["policy"]))
            if "routing" in raw:
                gateway.set_routing(str(raw["routing"]))
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        return gateway.state()

    @v1.get("/models")
    async def models():
        for backend in gateway.backends:
            if not backend.available:
                continue
            try:
                answer = await forwarder.client.get(f"{backend.config.url}/v1/models", headers=backend.headers,
                                                    timeout=CONNECT_TIMEOUT_S)
            except httpx.HTTPError:
                continue
            return Response(answer.content, status_code=answer.status_code,
                            media_type=answer.headers.get("content-type", "application/json"))
        raise gateway.no_backend_error()

    @v1.api_route("/responses/{stored_id}", methods=["GET", "DELETE"])
    async def stored_response(stored_id: str, request: Request):
        try:
            return await forwarder.stored_response(request, stored_id)
        except ClientGone:
            return Response(status_code=499)

    @v1.get("/responses/{stored_id}/input_items")
    async def stored_input_items(stored_id: str, request: Request):
        return await stored_response(stored_id, request)

    @v1.post("/{path:path}")
    async def forward(path: str, request: Request):
        raw = await read_body(request, current().max_body_bytes)
        inbound = inspect(raw, request.headers.get("x-agent-name"))
        try:
            return await forwarder.forward(request, f"/v1/{path}", inbound)
        except ClientGone:
            return Response(status_code=499)

    app.include_router(control)
    app.include_router(v1)

    @app.get("/metrics", dependencies=reads)
    async def metrics():
        return Response(render(registry), media_type=CONTENT_TYPE)

    @app.get("/health")
    async def health():
        up = [b.label for b in gateway.backends if b.up]
        status = 200 if up else 503
        return JSONResponse({"status": "ok" if up else "unavailable", "backends_up": up,
                             "backends": len(gateway.backends), "waiting": gateway.num_waiting}, status_code=status)

    return app
