"""The HTTP edge every API shares: what a request brings before it reaches the engine (its body, its key, and
the agent it is served as), and what goes back on a stream (server-sent events, keep-alives, hang-ups).

The body (`read_json`, `read_body`): refused by Content-Length before reading, capped while streaming in.

Agent-named base URLs (`/agents/NAME/...` serves `/...` as agent NAME), and harnesses' sub-agents.

A harness the panel launches cannot always be told to send a header or a `user` field, but every one
takes a base URL; so each launched agent gets `http://HOST:PORT/agents/NAME` (`.../v1` for OpenAI
clients) and its requests are counted, scheduled and logged as NAME whatever its body says.

A harness's sub-agent comes under its parent's name (the same base URL, session or cache key), but it
is another conversation: served as the same agent, its first turn would take over the parent's cached
sequence in place (an agent's next turn adopts its last one) and the parent's next turn would
recompute what it had. The harnesses say which requests are a sub-agent's, so those are named
PARENT/ID.

Keys. Who may use which route, by the key a request sends (app.service.agents says whose it is).

Three kinds of route: INFERENCE (generation, token counts, models), READ (the scheduler's state, /metrics)
and ADMIN (changing the scheduler or its policy).
- The panel's key (the user's --api-key, else the key the server made) may use every route.
- A launched agent's key may use the inference routes only, and only as that agent: its requests are served
  under its own name whatever the path or body names (its sub-agents still come as NAME/ID), another agent's
  path is refused, and so is a priority of its own choosing.
- No key (or a key nobody issued): where the user set --api-key, nothing; else the inference and read routes,
  as before agents had keys, but not under the name of an agent that holds one, however it is named (path,
  header, body: `check_name` where the name is settled). ADMIN always needs the panel's.
Refusals are errors in the route's API shape (a 401 for a missing key, a 403 for a key that may not do this).

Streams. Server-sent events every API's stream writer shares (one `sse`), keep-alives on a quiet stream, and
hang-ups. A client that hangs up has its request aborted: the engine frees its lane and KV at the next step.
Streams learn of the hang-up from Starlette, which cancels a StreamingResponse when the client's
disconnect message arrives; a whole reply waits on that same message beside its outputs
(`unless_hung_up`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import unquote

import anyio
from fastapi import Request
from pydantic import BaseModel
from starlette.requests import ClientDisconnect
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from swarm_panel.app.endpoint.errors import APIError, bad_request, forbidden, unauthorized
from swarm_panel.app.service.agents import AGENT, PANEL, AgentKeys
from swarm_panel.app.service.panel_key_file import folder
from swarm_panel.runtime.core.config import MAX_PRIORITY

# -- what a request brings: its body, its agent, its key ---------------------------------------

MAX_AGENT_CHARS = 256


def presented_key(authorization: str | None, x_api_key: str | None = None) -> str | None:
    """The key a request sends: its bearer token (OpenAI clients, ANTHROPIC_AUTH_TOKEN), else its x-api-key
    (Anthropic SDKs); `guard` says whose it is."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return x_api_key.strip() if x_api_key and x_api_key.strip() else None


async def read_json(request: Request, limit: int) -> Any:
    """The body as JSON: refused by Content-Length before reading, and capped while streaming in."""
    body = await read_body(request, limit)
    try:
        return json.loads(body, parse_constant=_not_json)
    except (ValueError, UnicodeDecodeError) as exc:
        detail = f": {exc.args[0]}" if isinstance(exc, _NonFinite) else ""
        raise bad_request(f"the request body is not valid JSON{detail}", code="invalid_json") from None


class _NonFinite(ValueError):
    pass


def _not_json(constant: str) -> Any:
    """Python's parser takes NaN and Infinity, which JSON has not: echoed back (metadata, a parameter) they
    would make a reply nothing can encode."""
    raise _NonFinite(f"{constant} is not a JSON number")


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refused by Content-Length before reading and capped while streaming in."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise bad_request("Content-Length is not a number") from None
        if size > limit:
            raise too_large(limit)
    chunks: list[bytes] = []
    received = 0
    try:
        async for chunk in request.stream():
            received += len(chunk)
            if received > limit:
                raise too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect:
        raise bad_request("the client hung up while sending the body") from None
    return b"".join(chunks)


def too_large(limit: int) -> APIError:
    return APIError(413, f"the request body is larger than {limit} bytes", code="request_too_large")


PREFIX = "/agents/"
SCOPE_KEY = "swarm_panel.agent"
MAX_PATH_NAME_CHARS = 64


def agent_base_url(server_url: str, name: str) -> str:
    """The base URL that names an agent (append /v1 for OpenAI clients)."""
    return f"{server_url.rstrip('/')}{PREFIX}{name}"


class AgentPaths:
    """ASGI middleware: strips the prefix and leaves the name in the scope (`agent_from_scope`)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(PREFIX):
            name, _, rest = scope["path"][len(PREFIX):].partition("/")
            name = unquote(name).strip()[:MAX_PATH_NAME_CHARS]
            if name:
                scope = dict(scope, path="/" + rest, raw_path=("/" + rest).encode())
                scope[SCOPE_KEY] = name
        await self.app(scope, receive, send)


def agent_from_scope(scope) -> str | None:
    return scope.get(SCOPE_KEY)


# (header that marks a sub-agent's request, header holding its own id): Claude Code 2.1, Codex 0.171
# (its sub-agents share the parent's session-id and prompt_cache_key), opencode 1.18.
SUBAGENT_HEADERS = (
    ("x-claude-code-agent-id", "x-claude-code-agent-id"),
    ("x-codex-parent-thread-id", "thread-id"),
    ("x-parent-session-id", "x-session-id"),
)
SUBAGENT_ID_CHARS = 12


def with_subagent(name: str, headers) -> str:
    """The agent's name, or PARENT/ID where the headers say the request is a harness's sub-agent's."""
    for marker, own in SUBAGENT_HEADERS:
        if headers.get(marker) and headers.get(own):
            return f"{name}/{headers[own].strip()[-SUBAGENT_ID_CHARS:]}"
    return name


def agent_of(user: str | None, request: Request) -> str:
    name = (agent_from_scope(request.scope) or user or request.headers.get("x-agent-name") or "").strip()
    return with_subagent(name[:MAX_AGENT_CHARS] or "anonymous", request.headers)


def priority_of(request: Request) -> int | None:
    """The X-Agent-Priority header (lower is served first under the priority policy); None when absent."""
    text = request.headers.get("x-agent-priority")
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise bad_request(f"X-Agent-Priority must be an integer (lower is served first), got {text[:40]!r}",
                          param="X-Agent-Priority") from None
    if abs(value) > MAX_PRIORITY:
        raise bad_request(f"X-Agent-Priority must be within +-{MAX_PRIORITY}", param="X-Agent-Priority")
    return value


INFERENCE, READ, ADMIN = "inference", "read", "admin"
PRIORITY_HEADER = "x-agent-priority"
RESERVED = "swarm_panel.reserved_names"  # in the scope of a request without an agent's key


def guard(keys: AgentKeys, route: str) -> Callable[[Request], Awaitable[None]]:
    """A FastAPI dependency that lets through only who may use a route of this kind."""

    async def check(request: Request) -> None:
        caller = keys.caller(presented_key(request.headers.get("authorization"), request.headers.get("x-api-key")))
        what = f"{request.method} {request.url.path}"
        if caller.kind == PANEL:
            return
        if caller.kind == AGENT:
            if route != INFERENCE:
                raise forbidden(f"{what} needs the panel's key; agent {caller.agent}'s key is good for inference only")
            claimed = agent_from_scope(request.scope)
            if claimed is not None and claimed != caller.agent:
                raise forbidden(f"this key is agent {caller.agent}'s: it cannot send as {claimed}")
            if PRIORITY_HEADER in request.headers:
                raise forbidden("an agent's priority is the panel's to set, not the agent's (X-Agent-Priority)")
            request.scope[SCOPE_KEY] = caller.agent  # above any `user` or X-Agent-Name the body or headers give
            return
        if keys.user_set:
            raise unauthorized()
        if route == ADMIN:
            raise unauthorized(f"{what} needs the panel's key: the server's --api-key, else the key it wrote to "
                               f"{folder()}/PORT.key; send it as 'Authorization: Bearer <key>'")
        if route == INFERENCE:
            request.scope[RESERVED] = keys.names()
            check_name(request.scope, agent_from_scope(request.scope) or request.headers.get("x-agent-name") or "")

    return check


def check_name(scope, agent: str) -> None:
    """Refuses a request without its agent's key that would be served as a launched agent (or its sub-agent)."""
    name = agent.strip().split("/", 1)[0]
    if name and name in scope.get(RESERVED, ()):
        raise forbidden(f"{name} is a launched agent: its requests need its own key")


# -- streams: server-sent events, keep-alives, hang-ups ----------------------------------------

T = TypeVar("T")


class ClientGone(Exception):
    """The client hung up before its request finished (answered, if at all, with a 499)."""


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE = b"data: [DONE]\n\n"
# An SSE comment: every SSE parser skips it (the OpenAI SDKs' included), yet it keeps the connection busy.
KEEPALIVE = b": keep-alive\n\n"


async def unless_hung_up(receive: Receive, work: Awaitable[T]) -> T:
    """`work`'s result, or ClientGone as soon as the client's disconnect message arrives.

    The same wait Starlette's StreamingResponse does for streams, for replies sent whole: once the
    body is read, the next message the server hands the app is the disconnect.
    """
    task = asyncio.ensure_future(work)
    hang_up = asyncio.ensure_future(_disconnect(receive))
    try:
        await asyncio.wait({task, hang_up}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        pending = [waiter for waiter in (task, hang_up) if not waiter.done()]
        for waiter in pending:
            waiter.cancel()
        # The work's own cleanup (its generators' finally blocks) runs before the caller goes on.
        await asyncio.gather(*pending, return_exceptions=True)
    if task.cancelled():
        raise ClientGone
    return task.result()


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class EventStreamResponse(StreamingResponse):
    """An SSE response that runs `on_close` however it ends: done, failed, or cancelled by a hang-up."""

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None],
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(content, media_type="text/event-stream", headers={**SSE_HEADERS, **(headers or {})})
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


async def with_heartbeat(events: AsyncIterator[bytes], every_s: float,
                         beat: Callable[[], bytes] = lambda: KEEPALIVE) -> AsyncIterator[bytes]:
    """`events`, with `beat()` in between whenever `every_s` pass without one (0: never).

    A stream can be quiet for minutes while a long prompt computes or waits behind others, and
    agents' idle watchdogs (Claude Code's, Codex's: five minutes of no bytes or no events) then
    hang up and send the whole request again, recomputing what was already under way.
    """
    if every_s <= 0:
        async for chunk in events:
            yield chunk
        return
    source = aiter(events)
    pending = asyncio.ensure_future(anext(source))
    try:
        while True:
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not done:
                yield beat()
                continue
            try:
                chunk = pending.result()
            except StopAsyncIteration:
                return
            yield chunk
            pending = asyncio.ensure_future(anext(source))
    finally:
        # Shielded: a hang-up cancels through Starlette's anyio scope, which cancels this task again at
        # every await, and closing `source` while the read under way has not ended would leave the
        # other side's request running (a backend's, behind the gateway).
        with anyio.CancelScope(shield=True):
            if not pending.done():
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                await aclose()


async def relayed_with_heartbeat(chunks: AsyncIterator[bytes], every_s: float, beat: bytes) -> AsyncIterator[bytes]:
    """Raw event-stream bytes from another server, with `beat` whenever `every_s` pass without any, but
    only where an event has ended: a raw chunk may stop in the middle of one."""
    quiet = object()
    tail = b"\n\n"
    # Closed with this one: its pending read of `chunks` must end before anyone closes their source.
    async with contextlib.aclosing(with_heartbeat(chunks, every_s, lambda: quiet)) as beating:
        async for chunk in beating:
            if chunk is quiet:
                if tail.endswith((b"\n\n", b"\r\r", b"\r\n\r\n")):
                    yield beat
                continue
            tail = (tail + chunk)[-4:]
            yield chunk


def sse(payload: dict[str, Any], event: str | None = None) -> bytes:
    """One server-sent event; `event` names it, as the Responses and Anthropic streams do."""
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def sse_event(event: BaseModel) -> bytes:
    """A typed stream event (Responses, Anthropic), named by its `type` as those streams name them."""
    return sse(event.model_dump(), event=event.type)
