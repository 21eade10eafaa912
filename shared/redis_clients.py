"""Redis clients of the service: every one decodes responses to ``str``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis
import redis.asyncio as aioredis

from shared.errors import UnavailableError

__all__ = ["async_client", "blocking_pool", "held_client", "sync_client"]

#: what a client refused for want of a pooled connection is told to wait
_POOL_RETRY_AFTER_S = 2


def sync_client(url: str) -> redis.Redis:
    """A blocking client, for workers, the CLI and thread-pool calls of the API."""
    return redis.Redis.from_url(url, decode_responses=True, health_check_interval=30)


def async_client(url: str) -> aioredis.Redis:
    """An asyncio client, for the API's short commands (caches, readiness, rate limits)."""
    return aioredis.Redis.from_url(url, decode_responses=True, health_check_interval=30)


def blocking_pool(
    url: str, *, max_connections: int, timeout_s: float
) -> aioredis.BlockingConnectionPool:
    """A bounded pool of asyncio connections for long blocking reads (event streams, waits).

    Kept apart from the API's other client, so that many open streams cannot take the
    connections every other request needs.

    Args:
        url: the Redis URL.
        max_connections: most connections open at once.
        timeout_s: longest wait for a free connection (see :func:`held_client`).
    """
    return aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout_s,
        decode_responses=True,
        health_check_interval=30,
    )


@asynccontextmanager
async def held_client(pool: aioredis.BlockingConnectionPool) -> AsyncIterator[aioredis.Redis]:
    """A client holding one connection of ``pool`` for the whole block.

    Raises:
        UnavailableError: no connection was free within the pool's timeout (busy: the
            error carries ``retry_after_s``).
    """
    client = aioredis.Redis(connection_pool=pool, single_connection_client=True)
    try:
        await client.initialize()
    except redis.exceptions.ConnectionError as exc:
        if not isinstance(exc.__cause__, TimeoutError):  # Redis itself is down
            raise
        raise UnavailableError(
            "too many event streams and job waits at once; try again later",
            retry_after_s=_POOL_RETRY_AFTER_S,
        ) from exc
    try:
        yield client
    finally:
        await client.aclose()
