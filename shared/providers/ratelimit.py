"""An upstream rate limit per provider, shared by every API process through Redis."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from shared.errors import UnavailableError

__all__ = ["acquire_slot"]

# Each call reserves the next free slot (one per `interval` µs) atomically and sleeps until
# it: callers of every process are spaced out, never more than the rate reaches a provider.
# Times are Redis's own clock, so the hosts' clocks do not matter.
_RESERVE = """
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000000 + tonumber(now[2])
local interval = tonumber(ARGV[1])
local nxt = tonumber(redis.call('GET', KEYS[1]) or '0')
local slot = math.max(t, nxt)
if slot - t > tonumber(ARGV[2]) then
  return -1
end
local ttl_ms = math.ceil((slot + interval - t) / 1000) + 1000
redis.call('SET', KEYS[1], tostring(slot + interval), 'PX', ttl_ms)
return slot - t
"""


async def acquire_slot(
    client: aioredis.Redis, name: str, rate_per_s: float, *, max_wait_s: float
) -> None:
    """Wait for this process's turn to call provider ``name``.

    Args:
        client: the async Redis client shared by the API processes.
        name: the provider's name (the limit is per provider).
        rate_per_s: most calls per second to that provider, over all processes.
        max_wait_s: longest wait; a busier provider is refused instead.

    Raises:
        UnavailableError: the next free slot is further away than ``max_wait_s``.
    """
    interval_us = max(1, int(1_000_000 / rate_per_s))
    wait_us = int(
        await client.eval(
            _RESERVE, 1, f"mapsvc:ratelimit:{name}", interval_us, int(max_wait_s * 1_000_000)
        )
    )
    if wait_us < 0:
        raise UnavailableError(
            f"provider {name} is busy (rate limit {rate_per_s}/s); try again later",
            provider=name,
        )
    if wait_us:
        await asyncio.sleep(wait_us / 1_000_000)
