"""OpenAI's error shape: {"error": {"message", "type", "param", "code"}}, the envelope the OpenAI SDKs parse. The
Responses API's errors answered whole, the server's own routes and any path no route matched answer in it too:
it is every app's fallback. A stream that fails after its 200 ends with a chunk holding the error, then [DONE].
"""

from __future__ import annotations

from typing import Any

from swarm_panel.app.endpoint.errors import APIError, ShapedRoute
from swarm_panel.app.endpoint.wire import DONE, sse

# Who is at fault, by status: the client (4xx, a specific type where OpenAI has one, else invalid_request_error)
# or this server or one behind it (5xx: 500, 502 backend failed, 503 no capacity, 504 timed out).
# tests/faults/test_error_types.py walks every status the code emits.
_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error", 429: "rate_limit_error"}


def error_type(status: int) -> str:
    return _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type(status), "param": param, "code": code}}


def stream_end(status: int, message: str, *, code: str | None = None) -> bytes:
    """How a chat or completions stream already answered 200 ends when it fails (`status` says who failed): an
    error chunk, then [DONE], so an SDK raises a typed error rather than a protocol error."""
    return sse(error_body(status, message, code=code)) + DONE


class OpenAIRoute(ShapedRoute):
    """A route of OpenAI's API (app.openai_api.routes)."""

    @staticmethod
    def error_json(error: APIError) -> dict[str, Any]:
        return error_body(error.status, error.message, error.param, error.code)
