"""One JSON error shape for every failure, and the table from error class to HTTP status."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

import redis.exceptions
import sqlalchemy.exc
from kombu.exceptions import OperationalError as BrokerError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from shared.errors import (
    ConflictError,
    ForbiddenError,
    InvalidInputError,
    JobCancelledError,
    MapsvcError,
    NotFoundError,
    PayloadTooLargeError,
    TooManyRequestsError,
    UnauthorizedError,
    UnavailableError,
    UnprocessableError,
    UpstreamBadAnswerError,
    UpstreamConnectTimeoutError,
    UpstreamError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)

__all__ = [
    "error_for",
    "error_response",
    "install_error_handlers",
    "status_of",
    "www_authenticate",
]

log = logging.getLogger("mapsvc.api")

STATUS: dict[type[MapsvcError], int] = {
    MapsvcError: 500,
    InvalidInputError: 400,
    NotFoundError: 404,
    ConflictError: 409,
    JobCancelledError: 409,
    UnprocessableError: 422,
    UnavailableError: 503,
    ForbiddenError: 403,
    UnauthorizedError: 401,
    TooManyRequestsError: 429,
    PayloadTooLargeError: 413,
    # provider failures: 502 and the custom 52x codes (docs/api/providers.md "Provider errors")
    UpstreamError: 502,
    UpstreamBadAnswerError: 520,
    UpstreamUnreachableError: 521,
    UpstreamConnectTimeoutError: 522,
    UpstreamTimeoutError: 524,
}

_HTTP_CODES = {404: "not-found", 405: "method-not-allowed"}


def www_authenticate(error: str | None = None) -> str:
    """The ``WWW-Authenticate`` header of a 401: the schemes this service takes (RFC 6750's
    ``error`` only when credentials came and were not valid)."""
    bearer = 'Bearer realm="mapsvc"' + (f', error="{error}"' if error else "")
    return f'{bearer}, Basic realm="mapsvc", ApiKey realm="mapsvc"'


def status_of(error: MapsvcError) -> int:
    """HTTP status of a domain error: the nearest class in :data:`STATUS`."""
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def error_response(
    request: Request, status: int, code: str, message: str, detail: dict[str, object] | None = None
) -> JSONResponse:
    """The error body every failure uses: ``{"error": {"code", "message", "detail"}}``."""
    body = {"error": {"code": code, "message": message, "detail": detail or {}}}
    return JSONResponse(body, status_code=status, headers={"X-Request-ID": _request_id(request)})


def _request_id(request: Request) -> str:
    return str(getattr(request.state, "request_id", ""))


async def _domain_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, MapsvcError)
    status = status_of(exc)
    if status >= 500:
        log.error("request %s: %s: %s", _request_id(request), exc.code, exc.message)
    response = error_response(request, status, exc.code, exc.message, exc.detail)
    if isinstance(exc, UnauthorizedError):
        response.headers["WWW-Authenticate"] = www_authenticate()
    retry_after = exc.detail.get("retry_after_s")
    if isinstance(retry_after, int | float):  # a busy service says when to come back
        response.headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
    return response


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, f"http-{exc.status_code}")
    message = (
        exc.detail
        if exc.status_code not in _HTTP_CODES
        else (
            f"no route {request.method} {request.url.path}"
            if exc.status_code == 404
            else f"method {request.method} not allowed on {request.url.path}; allowed:"
            f" {(exc.headers or {}).get('Allow', '')}"
        )
    )
    response = error_response(request, exc.status_code, code, message)
    if exc.headers:
        response.headers.update(exc.headers)
    return response


async def _unavailable(request: Request, exc: Exception) -> Response:
    redis_errors = redis.exceptions.ConnectionError | redis.exceptions.TimeoutError | BrokerError
    service = "Redis" if isinstance(exc, redis_errors) else "PostgreSQL"
    busy = isinstance(exc, sqlalchemy.exc.TimeoutError)  # no free connection in the pool
    state = "busy" if busy else "unreachable"
    log.error("request %s: %s %s: %s", _request_id(request), service, state, exc)
    response = error_response(
        request,
        503,
        UnavailableError.code,
        f"{service} is {state}; try again later",
        {"service": service},
    )
    response.headers["Retry-After"] = "1" if busy else "5"
    return response


async def _unhandled(request: Request, exc: Exception) -> Response:
    rid = _request_id(request)
    log.error("request %s failed", rid, exc_info=exc)
    return error_response(
        request, 500, MapsvcError.code, f"internal error (request id {rid})", {"request_id": rid}
    )


_Handler = Callable[[Request, Exception], Awaitable[Response]]

#: the handler of each kind of failure, most specific first
_HANDLERS: tuple[tuple[type[Exception], _Handler], ...] = (
    (MapsvcError, _domain_error),
    (HTTPException, _http_error),
    (redis.exceptions.ConnectionError, _unavailable),
    (redis.exceptions.TimeoutError, _unavailable),
    (BrokerError, _unavailable),
    (sqlalchemy.exc.OperationalError, _unavailable),
    (sqlalchemy.exc.InterfaceError, _unavailable),
    (sqlalchemy.exc.TimeoutError, _unavailable),  # pool exhausted
    (Exception, _unhandled),
)


async def error_for(request: Request, exc: Exception) -> Response:
    """The error response of ``exc``, for code outside the routes (middleware)."""
    handler = next(h for cls, h in _HANDLERS if isinstance(exc, cls))
    return await handler(request, exc)


def install_error_handlers(app: Starlette) -> None:
    """Route every kind of failure to the one JSON error shape."""
    for cls, handler in _HANDLERS:
        app.add_exception_handler(cls, handler)
