"""Errors in the API's own shape, and the handlers that make them.

OpenAI's {"error": {"message", "type", "param", "code"}} everywhere (the Responses API included),
except under /v1/messages, where Anthropic clients expect {"type": "error", "error": {"type", "message"}}.
A client's mistake is always a 4xx with a message saying what to fix; a 5xx is ours or a backend's, and its
type says so (server_error; Anthropic's api_error or overloaded_error). A stream that fails after its 200
ends with the API's own error event and proper end (`stream_failure`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from swarm_panel.app.endpoint.streaming import sse

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1

# Who is at fault, by status, in each API's words: the client (4xx, a specific type where the API has one,
# else invalid_request_error) or this server or one behind it (5xx: 500, 502 backend failed, 503 no capacity,
# 504 timed out). `error_type` reads it; tests/faults/test_error_types.py walks every status the code emits.
_OPENAI_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}
_ANTHROPIC_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
# A Responses stream's `response.failed` carries a code, not a type.
_RESPONSES_CODES = {429: "rate_limit_exceeded"}
ANTHROPIC_PREFIX = "/v1/messages"


def error_type(status: int, api: str = "openai") -> str:
    """The error type (a Responses stream: its failure code) for `status` in `api`'s words."""
    if api == "anthropic":
        return _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    if api == "responses":
        return _RESPONSES_CODES.get(status, "server_error" if status >= 500 else "invalid_prompt")
    return _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def api_of(path: str) -> str:
    """Which API a route's clients speak, by its path (an agent's /agents/NAME/v1/... included)."""
    if "/messages" in path:
        return "anthropic"
    if "/responses" in path:
        return "responses"
    return "openai"


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, self.param, self.code)


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type(status), "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def overloaded(message: str) -> APIError:
    return APIError(503, message, code="overloaded", headers={"Retry-After": str(RETRY_AFTER_S)})


def validation_error(exc: ValidationError | RequestValidationError) -> APIError:
    """The first problem pydantic found, named by its field path."""
    errors = exc.errors()
    if not errors:
        return bad_request("invalid request body")
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ()) if part not in ("body",)]
    # Union members add their type to the path ("str", "list[int]", "literal[...]"); keep field names only.
    loc = [part for part in loc if not _is_type_tag(part)]
    param = ".".join(loc) or None
    message = first.get("msg", "invalid value")
    if first.get("type") == "missing":
        message = "field required"
    elif first.get("type") == "json_invalid":
        return bad_request("the request body is not valid JSON", code="invalid_json")
    return bad_request(f"{param}: {message}" if param else message, param=param)


_TYPE_TAGS = {"str", "int", "float", "bool", "none", "dict", "list"}


def _is_type_tag(part: str) -> bool:
    return "[" in part or part in _TYPE_TAGS or part[:1].isupper()


def anthropic_error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(status, "anthropic"), "message": message}}


def stream_failure(path: str, status: int, message: str, *, code: str | None = None, response_id: str | None = None,
                   sequence_number: int = 0, model: str = "") -> bytes:
    """How a stream already answered 200 ends when it fails (`status` says who failed): the API's own error
    event, then its proper end, so an SDK raises a typed error rather than a protocol error. Chat and
    completions: an error chunk, then [DONE]. Responses: `response.failed`, its closing event. Messages: the
    `error` event, then `message_stop`."""
    api = api_of(path)
    if api == "anthropic":
        return (sse(anthropic_error_body(status, message), "error")
                + sse({"type": "message_stop"}, "message_stop"))
    if api == "responses":
        response = {"id": response_id or f"resp_{uuid.uuid4().hex}", "object": "response",
                    "created_at": int(time.time()), "status": "failed", "model": model, "output": [],
                    "error": {"code": error_type(status, "responses"), "message": message},
                    "incomplete_details": None}
        return sse({"type": "response.failed", "sequence_number": sequence_number, "response": response},
                    "response.failed")
    return sse(error_body(status, message, code=code)) + b"data: [DONE]\n\n"


def unauthorized(message: str = "missing or wrong API key: send 'Authorization: Bearer <key>' or "
                                "'x-api-key: <key>'") -> APIError:
    return APIError(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


def forbidden(message: str) -> APIError:
    return APIError(403, message, code="forbidden")


def shaped(request: Request, error: APIError) -> JSONResponse:
    """The error in the shape the route's clients parse."""
    if request.url.path.startswith(ANTHROPIC_PREFIX):
        body = anthropic_error_body(error.status, error.message)
    else:
        body = error.body()
    return JSONResponse(body, status_code=error.status, headers=error.headers)


def install_error_handlers(app: FastAPI, on_error: Callable[[Request, APIError], None] | None = None) -> None:
    """Every error in its route's API shape; `on_error` sees each one first (the request log)."""

    def error_response(request: Request, error: APIError) -> JSONResponse:
        if on_error is not None:
            on_error(request, error)
        return shaped(request, error)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _request_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(request, validation_error(exc))

    @app.exception_handler(ValidationError)
    async def _validation(request: Request, exc: ValidationError) -> JSONResponse:
        return error_response(request, validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(request, APIError(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None)))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(request, APIError(500, f"internal server error: {type(exc).__name__}: {exc}"))
