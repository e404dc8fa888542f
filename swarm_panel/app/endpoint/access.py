"""Who may use which route, by the key a request sends (app.service.agent_keys says whose it is).

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
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Request

from swarm_panel.app.endpoint.agent_paths import SCOPE_KEY, agent_from_scope
from swarm_panel.app.endpoint.errors import forbidden, presented_key, unauthorized
from swarm_panel.app.service.agent_keys import AGENT, PANEL, AgentKeys
from swarm_panel.app.service.panel_key_file import folder

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
