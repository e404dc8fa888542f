"""Anthropic's error shape: {"type": "error", "error": {"type", "message"}}, as Anthropic's SDKs and Claude Code
parse it, on its routes and on any path under MESSAGES_PREFIX that no route matched. A stream that fails after its 200
ends with the `error` event, then `message_stop`.
"""

from __future__ import annotations

from typing import Any

from swarm_panel.app.endpoint.errors import APIError, ShapedRoute
from swarm_panel.app.endpoint.wire import sse

# Where the server mounts the Messages API (app.server.app): an unrouted path under it is a Messages client's.
MESSAGES_PREFIX = "/v1/messages"

# Who is at fault, by status: the client (4xx, a specific type where Anthropic has one, else
# invalid_request_error) or this server or one behind it (5xx: api_error, or overloaded_error when there is no
# capacity). tests/faults/test_error_types.py walks every status the code emits.
_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    return _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


def stream_end(status: int, message: str) -> bytes:
    """How a Messages stream already answered 200 ends when it fails (`status` says who failed): the `error`
    event, then `message_stop`, so an SDK raises a typed error rather than a protocol error."""
    return sse(error_body(status, message), "error") + sse({"type": "message_stop"}, "message_stop")


class AnthropicRoute(ShapedRoute):
    """A route of Anthropic's Messages API (app.anthropic_api.routes)."""

    @staticmethod
    def error_json(error: APIError) -> dict[str, Any]:
        return error_body(error.status, error.message)
