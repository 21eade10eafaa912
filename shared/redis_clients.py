"""Redis clients of the service: every one decodes responses to ``str``."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from shared.errors import UnavailableError

__all__ = ["async_client", "blocking_pool", "held_client", "sync_client"]

T = TypeVar("T")

#: what a client refused for want of a pooled connection is told to wait
_POOL_RETRY_AFTER_S = 2


class _UntilBack(Retry):
    """Retries for ``outage_s`` seconds however the calls nest (a connect inside a command)."""

    def __init__(self, outage_s: float) -> None:
        # tries 0.1, 0.2, 0.4, 0.8 s apart, then every second, until the time is up
        super().__init__(ExponentialBackoff(cap=1.0, base=0.05), retries=-1)
        self.outage_s = outage_s

    def call_with_retry(
        self,
        do: Callable[[], T],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        """``do()``, tried again on connection errors until ``outage_s`` have passed."""
        deadline = time.monotonic() + self.outage_s

        def fail_in_time(error: Exception, *failures: int) -> None:
            fail(error, *failures)
            if time.monotonic() >= deadline:
                raise error

        return super().call_with_retry(do, fail_in_time, is_retryable, with_failure_count)


def sync_client(url: str, *, outage_s: float = 0.0) -> redis.Redis:
    """A blocking client, for workers, the CLI and thread-pool calls of the API.

    Args:
        url: the Redis URL.
        outage_s: how long a command that finds Redis down keeps trying (Redis restarting:
            a worker's job rides it out); 0: redis-py's few quick retries, so that the API
            answers 503 at once.
    """
    if outage_s <= 0:
        return redis.Redis.from_url(url, decode_responses=True, health_check_interval=30)
    return redis.Redis.from_url(
        url, decode_responses=True, health_check_interval=30, retry=_UntilBack(outage_s)
    )


#: the connections of the API's client for short commands, and its longest wait for one
_SHORT_CONNECTIONS, _SHORT_WAIT_S = 100, 3.0


def async_client(url: str) -> aioredis.Redis:
    """An asyncio client, for the API's short commands (caches, readiness, rate limits).

    At most 100 connections, as redis-py's own pool, but a request finding them all busy
    waits its turn (up to 3 s) instead of failing: a burst of a few hundred requests at once
    (a front letting a caller's burst through) took every connection, and the requests past
    the hundredth answered ``503``, whoever sent them."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=_SHORT_CONNECTIONS,
        timeout=_SHORT_WAIT_S,
        decode_responses=True,
        health_check_interval=30,
    )
    client = aioredis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True  # closed with the client, as from_url's is
    return client


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
        # a pool made alone has connections that never retry: the first command on one that
        # Redis closed (a restart) would fail; it is sent again once on a new connection
        retry=AsyncRetry(NoBackoff(), 1),
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
