"""Agent-named base URLs: `/agents/NAME/...` serves `/...` as agent NAME.

A harness the panel launches cannot always be told to send a header or a `user` field, but every one
takes a base URL; so each launched agent gets `http://HOST:PORT/agents/NAME` (`.../v1` for OpenAI
clients) and its requests are counted, scheduled and logged as NAME whatever its body says.
"""

from __future__ import annotations

from urllib.parse import unquote

PREFIX = "/agents/"
SCOPE_KEY = "swarm_panel.agent"
MAX_NAME_CHARS = 64


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
            name = unquote(name).strip()[:MAX_NAME_CHARS]
            if name:
                scope = dict(scope, path="/" + rest, raw_path=("/" + rest).encode())
                scope[SCOPE_KEY] = name
        await self.app(scope, receive, send)


def agent_from_scope(scope) -> str | None:
    return scope.get(SCOPE_KEY)
