"""Quotas: each caller's requests per minute, per budget (tiles, data, providers, jobs,
documents, auth, admin): every route spends one.

A route's budget is its endpoint's (``api.endpoint``); the caller is the request's principal,
or for anonymous requests the client's address. The limits are
``settings.auth.rate_<budget>_per_min``; the counting is :func:`shared.quotas.hit`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Literal

import redis.asyncio as aioredis
from redis.exceptions import MaxConnectionsError, RedisError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from api.errors import error_response
from api.scope import PRINCIPAL_KEY
from shared.auth.principal import Principal
from shared.errors import TooManyRequestsError
from shared.quotas import Decision, hit
from shared.settings import AuthSettings

__all__ = [
    "WINDOW_S",
    "Budget",
    "Budgets",
    "caller_of",
    "rate_headers",
]

log = logging.getLogger("mapsvc.api")

Budget = Literal["tiles", "data", "providers", "jobs", "documents", "auth", "admin"]

#: the window of every limit: the settings give requests per minute
WINDOW_S = 60.0

#: after a Redis failure, requests pass unlimited this long before Redis is asked again
_PAUSE_S = 5.0
#: the least time between two warnings that Redis failed
_LOG_EVERY_S = 60.0


def caller_of(scope: Scope) -> str:
    """Who spends the budget: the principal's id, or the address of an anonymous client.

    The address is the connection's peer: ``X-Forwarded-For`` is not trusted.
    """
    principal = scope.get(PRINCIPAL_KEY)
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


class Budgets:
    """Each caller's budgets: beyond a limit, ``429`` with ``Retry-After``.

    An endpoint's wrapper spends one request of its budget (``api.endpoint``); limited routes
    answer with ``RateLimit-Limit``, ``RateLimit-Remaining`` and ``RateLimit-Reset``, refused
    or not. The caller is the request's principal (authentication ran before).

    A Redis outage never fails a request: when Redis cannot be reached, fails, or does not answer
    within ``timeout_s``, requests pass unlimited (Redis is asked again after a few seconds),
    and a warning is logged at most once a minute. A request that finds no free connection in
    the client's pool passes too (that is no outage: the next request asks Redis again).
    """

    def __init__(
        self, settings: AuthSettings, redis: aioredis.Redis, *, timeout_s: float = 0.5
    ) -> None:
        """Count in ``redis`` against the limits of ``settings`` (``settings.auth``); wait
        for Redis at most ``timeout_s``."""
        self.limits: dict[Budget, int] = {
            "tiles": settings.rate_tiles_per_min,
            "data": settings.rate_data_per_min,
            "providers": settings.rate_providers_per_min,
            "jobs": settings.rate_jobs_per_min,
            "documents": settings.rate_documents_per_min,
            "auth": settings.rate_auth_per_min,
            "admin": settings.rate_admin_per_min,
        }
        self.redis = redis
        self.timeout_s = timeout_s
        self._paused_until = 0.0
        self._warned_at = -math.inf

    async def spend(
        self, request: Request, budget: Budget
    ) -> tuple[dict[str, str], Response | None]:
        """Spend one request of ``budget``: the ``RateLimit-*`` headers, and the ``429`` when
        the caller has none left (no headers and no refusal while Redis is out)."""
        decision = await self._decide(request.scope, budget)
        if decision is None:
            return {}, None
        headers = rate_headers(decision)
        if decision.allowed:
            return headers, None
        return headers, _refusal(request, budget, decision, headers)

    async def _decide(self, scope: Scope, budget: Budget) -> Decision | None:
        """The limit's answer, or None when Redis is out (the request passes)."""
        now = time.monotonic()
        if now < self._paused_until:
            return None
        key = f"{budget}:{caller_of(scope)}"
        try:
            async with asyncio.timeout(self.timeout_s):
                return await hit(self.redis, key, self.limits[budget], WINDOW_S)
        except (RedisError, TimeoutError) as exc:
            if not isinstance(exc, MaxConnectionsError):  # a busy pool is no outage
                self._paused_until = now + _PAUSE_S
            if now - self._warned_at >= _LOG_EVERY_S:
                self._warned_at = now
                log.warning("rate limits off for now: Redis failed: %r", exc)
            return None


def _refusal(
    request: Request, budget: Budget, decision: Decision, headers: dict[str, str]
) -> Response:
    """The ``429`` of a refused request, in the one error shape, with its headers."""
    retry_after = max(1, math.ceil(decision.retry_after_s))
    response = error_response(
        request,
        429,
        TooManyRequestsError.code,
        f"too many {budget} requests: at most {decision.limit} a minute;"
        f" try again in {retry_after} s",
        {"budget": budget, "limit": decision.limit, "retry_after_s": retry_after},
    )
    response.headers.update(headers | {"Retry-After": str(retry_after)})
    return response
