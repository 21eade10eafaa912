"""Redis clients of the service: every one decodes responses to ``str``."""

from __future__ import annotations

import redis
import redis.asyncio as aioredis

__all__ = ["async_client", "sync_client"]


def sync_client(url: str) -> redis.Redis:
    """A blocking client, for workers, the CLI and thread-pool calls of the API."""
    return redis.Redis.from_url(url, decode_responses=True, health_check_interval=30)


def async_client(url: str) -> aioredis.Redis:
    """An asyncio client, for what the API waits on (event streams, job completion)."""
    return aioredis.Redis.from_url(url, decode_responses=True, health_check_interval=30)
