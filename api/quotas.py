"""Quotas: each caller's requests per minute, per budget (tiles, data, providers, jobs).

A route's budget comes from the first segment of its path under the mount (:data:`BUDGETS`);
the caller is the request's principal, or for anonymous requests the client's address. The
limits are ``settings.auth.rate_<budget>_per_min``; the counting is :func:`shared.quotas.hit`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping
from typing import Literal

import redis.asyncio as aioredis
from redis.exceptions import MaxConnectionsError, RedisError
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response
from api.mounts import USER_PREFIX, V1_PREFIX
from api.services import services
from shared.auth.principal import Principal
from shared.errors import TooManyRequestsError
from shared.quotas import Decision, hit
from shared.settings import AuthSettings

__all__ = [
    "BUDGETS",
    "WINDOW_S",
    "Budget",
    "QuotaMiddleware",
    "budget_of",
    "caller_of",
    "rate_headers",
]

log = logging.getLogger("mapsvc.api")

Budget = Literal["tiles", "data", "providers", "jobs"]

#: the budget of each route, by the first segment of its path under the mount; the routes not
#: listed (health, ready, openapi.json, jobs and events, auth, admin) have none
BUDGETS: Mapping[str, Budget] = {
    "rtile": "tiles",
    "vtile": "tiles",  # but not DELETE vtile/<layer>/cache (admin)
    "geojson": "data",
    "gis-datasource": "data",
    "gis-raster": "data",  # the listing; gis-raster/<path> configures a raster: jobs
    "gis-raster-stat": "data",
    "gis-raster-info": "data",
    "geocode": "providers",
    "reverse-geocode": "providers",
    "map-route": "providers",
    "weather": "providers",
    "height": "providers",
    "gis-url-proxy": "providers",
    "dzk": "providers",
    "dzk.api": "providers",
    "gis-layer-pretile": "jobs",
    "gis-layer-compress": "jobs",
    "gis-speed-test": "jobs",
    "pdf-merge": "jobs",
}

#: the window of every limit: the settings give requests per minute
WINDOW_S = 60.0

_MOUNTS = (USER_PREFIX + "/", V1_PREFIX + "/")
#: after a Redis failure, requests pass unlimited this long before Redis is asked again
_PAUSE_S = 5.0
#: the least time between two warnings that Redis failed
_LOG_EVERY_S = 60.0


def budget_of(method: str, path: str) -> Budget | None:
    """The budget a request spends, or None when its route has no limit.

    Args:
        method: the HTTP method (CORS preflights, ``OPTIONS``, are never limited).
        path: the request's path below the app's root path (``/api-user/rtile/…``).
    """
    prefix = next((p for p in _MOUNTS if path.startswith(p)), None)
    if prefix is None or method == "OPTIONS":
        return None
    segment, _, rest = path[len(prefix) :].partition("/")
    if segment == "gis-raster" and rest:
        return "jobs"
    if segment == "vtile" and method == "DELETE":
        return None
    return BUDGETS.get(segment)


def caller_of(scope: Scope) -> str:
    """Who spends the budget: the principal's id, or the address of an anonymous client.

    The address is the connection's peer: ``X-Forwarded-For`` is not trusted.
    """
    principal = scope.get("mapsvc.principal")
    if isinstance(principal, Principal) and not principal.anonymous:
        return principal.id
    client = scope.get("client")
    return f"address:{client[0] if client else ''}"


def rate_headers(decision: Decision) -> dict[str, str]:
    """The ``RateLimit-*`` headers (IETF draft) of a decision."""
    return {
        "RateLimit-Limit": str(decision.limit),
        "RateLimit-Remaining": str(decision.remaining),
        "RateLimit-Reset": str(math.ceil(decision.reset_s)),
    }


class QuotaMiddleware:
    """Refuse a caller's requests beyond its budget's limit: ``429`` with ``Retry-After``.

    Limited routes answer with ``RateLimit-Limit``, ``RateLimit-Remaining`` and
    ``RateLimit-Reset``, refused or not. It must run after authentication, which leaves the
    principal in ``scope["mapsvc.principal"]`` (none: the caller is anonymous).

    A Redis outage never fails a request: when Redis cannot be reached, fails, or does not answer
    within ``timeout_s``, requests pass unlimited (Redis is asked again after a few seconds),
    and a warning is logged at most once a minute. A request that finds no free connection in
    the client's pool passes too (that is no outage: the next request asks Redis again).
    """

    def __init__(
        self,
        app: ASGIApp,
        settings: AuthSettings,
        redis: aioredis.Redis | None = None,
        *,
        timeout_s: float = 0.5,
    ) -> None:
        """Limit ``app``'s requests.

        Args:
            app: the application to guard.
            settings: the limits (``settings.auth``).
            redis: the async Redis client; None: the process's, ``services(...).aredis``,
                looked up at each request (the lifespan builds it after the middleware).
            timeout_s: the longest wait for Redis before a request passes unlimited.
        """
        self.app = app
        self.limits: dict[Budget, int] = {
            "tiles": settings.rate_tiles_per_min,
            "data": settings.rate_data_per_min,
            "providers": settings.rate_providers_per_min,
            "jobs": settings.rate_jobs_per_min,
        }
        self.redis = redis
        self.timeout_s = timeout_s
        self._paused_until = 0.0
        self._warned_at = -math.inf

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: D102
        budget = None
        if scope["type"] == "http":
            budget = budget_of(scope["method"], _route_path(scope))
        decision = None if budget is None else await self._decide(scope, budget)
        if budget is None or decision is None:
            await self.app(scope, receive, send)
            return
        headers = rate_headers(decision)
        if not decision.allowed:
            await _refusal(scope, budget, decision, headers)(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).update(headers)
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _decide(self, scope: Scope, budget: Budget) -> Decision | None:
        """The limit's answer, or None when Redis is out (the request passes)."""
        now = time.monotonic()
        if now < self._paused_until:
            return None
        client = self.redis if self.redis is not None else services(Request(scope)).aredis
        key = f"{budget}:{caller_of(scope)}"
        try:
            async with asyncio.timeout(self.timeout_s):
                return await hit(client, key, self.limits[budget], WINDOW_S)
        except (RedisError, TimeoutError) as exc:
            if not isinstance(exc, MaxConnectionsError):  # a busy pool is no outage
                self._paused_until = now + _PAUSE_S
            if now - self._warned_at >= _LOG_EVERY_S:
                self._warned_at = now
                log.warning("rate limits off for now: Redis failed: %r", exc)
            return None


def _refusal(scope: Scope, budget: Budget, decision: Decision, headers: dict[str, str]) -> Response:
    """The ``429`` of a refused request, in the one error shape, with its headers."""
    retry_after = max(1, math.ceil(decision.retry_after_s))
    response = error_response(
        Request(scope),
        429,
        TooManyRequestsError.code,
        f"too many {budget} requests: at most {decision.limit} a minute;"
        f" try again in {retry_after} s",
        {"budget": budget, "limit": decision.limit, "retry_after_s": retry_after},
    )
    response.headers.update(headers | {"Retry-After": str(retry_after)})
    return response


def _route_path(scope: Scope) -> str:
    """The request's path below the app's root path (as the router matches it)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root + "/") else path
