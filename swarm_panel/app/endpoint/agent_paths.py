"""Agent-named base URLs (`/agents/NAME/...` serves `/...` as agent NAME), and harnesses' sub-agents.

A harness the panel launches cannot always be told to send a header or a `user` field, but every one
takes a base URL; so each launched agent gets `http://HOST:PORT/agents/NAME` (`.../v1` for OpenAI
clients) and its requests are counted, scheduled and logged as NAME whatever its body says.

A harness's sub-agent comes under its parent's name (the same base URL, session or cache key), but it
is another conversation: served as the same agent, its first turn would take over the parent's cached
sequence in place (an agent's next turn adopts its last one) and the parent's next turn would
recompute what it had. The harnesses say which requests are a sub-agent's, so those are named
PARENT/ID.
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
