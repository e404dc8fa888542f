"""Errors: what a route raises (`APIError`: a status, and a message saying what to fix), the helpers that make
the common ones, and the handlers that answer each in its route's API shape.

A client's mistake is always a 4xx with a message saying what to fix; a 5xx is ours or a backend's, and its type
says so. Each API's folder owns its shape (app.openai_api.errors, app.anthropic_api.errors,
app.responses_api.errors): the JSON body its clients parse, and how its stream ends when it fails after its 200.
An API's routes name its shape by their class (a `ShapedRoute`); a path no route matched (a 404) takes the shape
its app registered for the path's prefix, else the app's fallback (OpenAI's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1


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


ErrorJson = Callable[[APIError], dict[str, Any]]


class ShapedRoute(APIRoute):
    """A route of an API whose errors have a shape of their own. The API's folder subclasses it with its
    `error_json` and makes its router with it (`APIRouter(route_class=...)`); FastAPI leaves the route it matched
    in the request's scope, where the handlers find it."""

    error_json: ClassVar[ErrorJson]


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


def unauthorized(message: str = "missing or wrong API key: send 'Authorization: Bearer <key>' or "
                                "'x-api-key: <key>'") -> APIError:
    return APIError(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


def forbidden(message: str) -> APIError:
    return APIError(403, message, code="forbidden")


def install_error_handlers(app: FastAPI, fallback: ErrorJson, by_prefix: Mapping[str, ErrorJson] | None = None,
                           on_error: Callable[[Request, APIError], None] | None = None) -> None:
    """Every error in its route's API shape: the matched route's, else (no route matched) the shape `by_prefix`
    gives the first prefix the path starts with, else `fallback`. `on_error` sees each one first (the request
    log)."""
    prefixes = by_prefix or {}

    def error_response(request: Request, error: APIError) -> JSONResponse:
        if on_error is not None:
            on_error(request, error)
        route = request.scope.get("route")
        if isinstance(route, ShapedRoute):
            shape = route.error_json
        else:
            path = request.url.path
            shape = next((json for prefix, json in prefixes.items() if path.startswith(prefix)), fallback)
        return JSONResponse(shape(error), status_code=error.status, headers=error.headers)

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
