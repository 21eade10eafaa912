"""Calling providers: the shared HTTP client, retries, the rate limit, the Redis cache, errors."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import redis.asyncio as aioredis

from shared.cache import ByteBudget
from shared.errors import (
    MapsvcError,
    NotFoundError,
    UpstreamBadAnswerError,
    UpstreamConnectTimeoutError,
    UpstreamError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from shared.metrics import PROVIDER_ERRORS, PROVIDER_SECONDS
from shared.providers.config import Provider
from shared.providers.ratelimit import acquire_slot
from shared.settings import Providers, Settings
from shared.singleflight import SingleFlight

__all__ = ["USER_AGENT", "Upstream", "make_http_client", "round_coord", "upstream_error"]

log = logging.getLogger("mapsvc.providers")

USER_AGENT = "mapsvc/0.1 (+https://github.com/mapsvc)"
#: decimals coordinates are rounded to before a call (≈1 m), so near points share an entry
COORD_DECIMALS = 5


def round_coord(value: float) -> float:
    """A coordinate rounded for the cache key (and the call, so both agree)."""
    return round(value, COORD_DECIMALS)


def make_http_client(settings: Settings) -> httpx.AsyncClient:
    """The one provider client of a process: explicit timeouts and connection limits.

    Args:
        settings: the provider timeouts and connection limit.

    Returns:
        A client to close with ``aclose()`` when the process stops.
    """
    return httpx.AsyncClient(
        timeout=httpx.Timeout(
            settings.providers.timeout_s, connect=settings.providers.connect_timeout_s
        ),
        limits=httpx.Limits(
            max_connections=settings.providers.max_connections,
            max_keepalive_connections=min(20, settings.providers.max_connections),
        ),
        headers={"User-Agent": USER_AGENT},
        follow_redirects=False,
        trust_env=False,  # providers are reached directly; no proxy from the environment
    )


def upstream_error(name: str, exc: httpx.HTTPError) -> MapsvcError:
    """The domain error for a failed call to provider ``name``."""
    if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
        return UpstreamConnectTimeoutError(f"provider {name}: no connection in time", provider=name)
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeoutError(f"provider {name}: no answer in time", provider=name)
    if isinstance(exc, httpx.ConnectError):
        return UpstreamUnreachableError(f"provider {name} is unreachable", provider=name)
    return UpstreamBadAnswerError(
        f"provider {name}: broken answer ({type(exc).__name__})", provider=name
    )


@dataclass(frozen=True)
class Upstream:
    """What provider calls need: the HTTP client, Redis, and the retry/rate settings."""

    http: httpx.AsyncClient
    redis: aioredis.Redis
    retries: int = 2
    backoff_s: float = 0.2
    rate_wait_s: float = 10.0
    #: the answers cache's byte budget (``MAPSVC_PROVIDER_CACHE_MAX_BYTES``)
    cache: ByteBudget = ByteBudget("provider", Providers.model_fields["cache_max_bytes"].default)
    # calls in flight in this process, by cache key: the same question asked twice at once
    # (both keys of reverse-geocode from one provider, say) makes one call
    _inflight: SingleFlight[Any] = field(default_factory=SingleFlight, repr=False)

    @classmethod
    def from_settings(
        cls, http: httpx.AsyncClient, redis: aioredis.Redis, settings: Settings
    ) -> Upstream:
        """The upstream of a process, with the settings' retry and rate-limit values."""
        return cls(
            http,
            redis,
            retries=settings.providers.retries,
            backoff_s=settings.providers.backoff_s,
            rate_wait_s=settings.providers.rate_wait_s,
            cache=ByteBudget("provider", settings.providers.cache_max_bytes),
        )

    async def get_json(
        self,
        provider: Provider,
        path: str,
        params: Mapping[str, Any],
        *,
        secret_params: Mapping[str, str] | None = None,
        refresh: bool = False,
    ) -> Any:
        """GET ``path`` of the provider and decode its JSON answer, through the cache.

        Args:
            provider: the provider to call.
            path: the path under its base URL.
            params: the query (part of the cache key: round coordinates first).
            secret_params: query parameters kept out of the cache key and the logs (keys).
            refresh: skip the cache lookup (``nocache=1``); the answer is stored again.

        Returns:
            The decoded JSON of a 2xx answer.

        Raises:
            NotFoundError: the provider answered 4xx (no result), other than 401/403/429.
            UpstreamError: the provider failed (the subclass says how).
        """
        digest = hashlib.sha256(
            json.dumps([provider.base_url, path, dict(params)], sort_keys=True).encode()
        ).hexdigest()
        key = f"mapsvc:provider:{provider.name}:{digest}"
        if not refresh:
            hit = await self.redis.get(key)
            if hit is not None:
                return json.loads(str(hit))
        query = {**params, **(secret_params or {})}
        return await self._inflight.run(
            key, lambda: self._fetch_and_store(key, provider, path, query)
        )

    async def _fetch_and_store(
        self, key: str, provider: Provider, path: str, params: Mapping[str, Any]
    ) -> Any:
        try:
            body = await self._fetch(provider, path, params)
        except UpstreamError as exc:  # a "no result" (NotFoundError) is an answer, not a failure
            PROVIDER_ERRORS.labels(provider.name, exc.code).inc()
            raise
        await self.cache.aput(self.redis, key, json.dumps(body), provider.cache_ttl_s)
        return body

    async def _fetch(self, provider: Provider, path: str, params: Mapping[str, Any]) -> Any:
        name = provider.name
        url = provider.url(path)
        attempt = 0
        while True:
            # every attempt takes a slot: retries never push a provider past its rate
            await acquire_slot(self.redis, name, provider.rate_per_s, max_wait_s=self.rate_wait_s)
            retry = attempt < self.retries
            try:
                with PROVIDER_SECONDS.labels(name).time():
                    response = await self.http.get(url, params=dict(params))
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if not retry:
                    raise upstream_error(name, exc) from exc
            except httpx.HTTPError as exc:
                raise upstream_error(name, exc) from exc
            else:
                if response.status_code < 500 or not retry:
                    return _decode(name, response.status_code, response.content)
            await asyncio.sleep(self.backoff_s * 2**attempt)
            attempt += 1


def _decode(name: str, status: int, content: bytes) -> Any:
    try:
        body = json.loads(content) if content.strip() else None
    except ValueError:
        body = _NOT_JSON
    if status >= 500:
        raise UpstreamError(f"provider {name} failed (HTTP {status})", provider=name, status=status)
    if status in (401, 403):
        raise UpstreamError(
            f"provider {name} refused our credentials (HTTP {status})", provider=name, status=status
        )
    if status == 429:
        raise UpstreamError(
            f"provider {name} rate-limited us (HTTP 429)", provider=name, status=429
        )
    if status >= 400:
        raise NotFoundError(
            f"provider {name} has no result (HTTP {status}{_upstream_message(body)})",
            provider=name,
            status=status,
        )
    if status >= 300 or body is _NOT_JSON:
        log.warning("provider %s answered HTTP %s: %.200r", name, status, content)
        raise UpstreamBadAnswerError(
            f"provider {name} answered something that is not JSON", provider=name, status=status
        )
    return body


_NOT_JSON = object()


def _upstream_message(body: Any) -> str:
    if isinstance(body, dict):
        for field in ("message", "error", "title"):
            value = body.get(field)
            if isinstance(value, str) and value:
                return f": {value[:200]}"
    return ""
