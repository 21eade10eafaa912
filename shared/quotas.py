"""Rate limits per caller, shared by every API process and host through Redis.

Two counters, each one Lua script (atomic, timed by Redis's own clock, so the hosts' clocks do
not matter), each key under ``mapsvc:rate:`` and never without an expiry:

- :func:`hit`, the API's quotas: a leaky bucket (GCRA). ``limit`` hits may come at once; then
  the bucket drains at ``limit`` per ``window_s``, one more hit every ``window_s / limit``.
- :func:`failures_allowed`, :func:`count_failure` and :func:`forget_failures`, the failures
  of a caller (failed logins of an address, or of a login from an address; credentials that
  were not valid): a window opens at the first failure; ``max_failures`` failures in it
  refuse every further attempt until it closes.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

__all__ = [
    "PREFIX",
    "Decision",
    "count_failure",
    "failures_allowed",
    "forget_failures",
    "hit",
]

#: what every key this module writes starts with
PREFIX = "mapsvc:rate:"

# KEYS: the bucket, "<level> <µs>": the hits it held at that time. ARGV: limit, window (µs),
# cost (0: only read). It drains at `limit` a window; a hit fits while the level stays within
# the limit. Returns whether it fitted, and the level after it.
_BUCKET = """
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000000 + tonumber(now[2])
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local level = 0
local saved = redis.call('GET', KEYS[1])
if saved then
  local held, at = string.match(saved, '^(%S+) (%S+)$')
  level = math.max(0, tonumber(held) - math.max(0, t - tonumber(at)) * limit / window)
end
local allowed = level + cost <= limit
if allowed and cost > 0 then
  level = level + cost
  local drained_ms = math.max(1, math.ceil(level * window / limit / 1000))
  redis.call('SET', KEYS[1], string.format('%.17g %.17g', level, t), 'PX', drained_ms)
end
return {allowed and 1 or 0, string.format('%.17g', level)}
"""

# KEYS: the counter. ARGV: window (ms), cost (0: only read). The first count opens the window
# (the key's expiry), later ones add to it. Returns the count and the window's time left (ms).
_WINDOW = """
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[2]) > 0 then
  count = redis.call('INCRBY', KEYS[1], ARGV[2])
  if redis.call('PTTL', KEYS[1]) < 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
  end
end
return {count, math.max(0, redis.call('PTTL', KEYS[1]))}
"""

# KEYS: the counter. One count less, while the counter (and its window) is there.
_GIVE_BACK = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('DECR', KEYS[1]) end
"""

_SHA = {script: hashlib.sha1(script.encode()).hexdigest() for script in (_BUCKET, _WINDOW)}


@dataclass(frozen=True)
class Decision:
    """The answer of a rate limit to one request.

    Attributes:
        allowed: whether the request may go on.
        limit: the most requests per window.
        remaining: how many more requests would be allowed right now.
        reset_s: seconds until the whole limit is available again.
        retry_after_s: seconds until a refused request would be allowed (0 when allowed).
    """

    allowed: bool
    limit: int
    remaining: int
    reset_s: float
    retry_after_s: float


async def _run(client: aioredis.Redis, script: str, key: str, *args: int) -> list[str]:
    """Run ``script`` on ``key`` (cached by Redis: only its digest is sent once loaded)."""
    try:
        answer = await client.evalsha(_SHA[script], 1, PREFIX + key, *args)
    except NoScriptError:
        answer = await client.eval(script, 1, PREFIX + key, *args)
    return [value.decode() if isinstance(value, bytes) else str(value) for value in answer]


async def hit(
    client: aioredis.Redis, key: str, limit: int, window_s: float, cost: int = 1
) -> Decision:
    """Count a request of ``cost`` against ``limit`` per ``window_s``, if it fits.

    A refused request is not counted. The bucket drains continuously: after a burst of
    ``limit``, one more request fits every ``window_s / limit`` seconds.

    Args:
        client: an async Redis client (decoding responses or not).
        key: the caller and what it spends (``tiles:user:7``); stored as ``mapsvc:rate:<key>``.
        limit: the most requests per window (at least 1).
        window_s: the window, in seconds.
        cost: what this request counts for, from 0 (only look) to ``limit``.

    Raises:
        ValueError: a limit, window or cost out of range.
        redis.exceptions.RedisError: Redis cannot be reached or fails.
    """
    if limit < 1 or window_s <= 0 or not 0 <= cost <= limit:
        raise ValueError(f"bad rate limit: {cost=} of {limit=} per {window_s=}")
    window_us = max(1, round(window_s * 1_000_000))
    allowed, level = await _run(client, _BUCKET, key, limit, window_us, cost)
    per_hit_s = window_s / limit
    held = float(level)
    return Decision(
        allowed=allowed == "1",
        limit=limit,
        remaining=max(0, math.floor(limit - held)),
        reset_s=held * per_hit_s,
        retry_after_s=0.0 if allowed == "1" else (held + cost - limit) * per_hit_s,
    )


async def _window(
    client: aioredis.Redis, key: str, limit: int, window_s: float, cost: int
) -> Decision:
    count, left_ms = (int(v) for v in await _run(client, _WINDOW, key, _ms(window_s), cost))
    allowed = count < limit
    return Decision(
        allowed=allowed,
        limit=limit,
        remaining=max(0, limit - count),
        reset_s=left_ms / 1000,
        retry_after_s=0.0 if allowed else left_ms / 1000,
    )


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


async def failures_allowed(
    client: aioredis.Redis, key: str, *, max_failures: int, window_s: float
) -> Decision:
    """Whether the caller ``key`` may try again (counts nothing).

    Args:
        client: an async Redis client.
        key: who failed (``login:<address>``); stored as ``mapsvc:rate:<key>``.
        max_failures: failures that close the window to further attempts.
        window_s: how long the window lasts from the first failure, in seconds.

    Returns:
        Refused (with ``retry_after_s``) once ``max_failures`` failed in the window.
    """
    return await _window(client, key, max_failures, window_s, 0)


async def count_failure(
    client: aioredis.Redis, key: str, *, max_failures: int, window_s: float
) -> Decision:
    """Count a failure of ``key`` (arguments as :func:`failures_allowed`'s); the answer is
    :func:`failures_allowed`'s after it."""
    return await _window(client, key, max_failures, window_s, 1)


async def take_attempt(
    client: aioredis.Redis, key: str, *, max_failures: int, window_s: float
) -> Decision:
    """Count an attempt of ``key`` as a failure before it is made (arguments as
    :func:`failures_allowed`'s): attempts made at once each count, so none gets past
    ``max_failures`` while the others are still being checked. Refused (and not counted) past
    it; an attempt that did not fail is given back (:func:`give_back`)."""
    count, left_ms = (int(v) for v in await _run(client, _WINDOW, key, _ms(window_s), 1))
    if count > max_failures:
        await give_back(client, key)
        return Decision(False, max_failures, 0, left_ms / 1000, left_ms / 1000)
    return Decision(True, max_failures, max_failures - count, left_ms / 1000, 0.0)


async def give_back(client: aioredis.Redis, key: str) -> None:
    """Take back an attempt :func:`take_attempt` counted (it did not fail)."""
    await client.eval(_GIVE_BACK, 1, PREFIX + key)


async def forget_failures(client: aioredis.Redis, key: str) -> None:
    """Forget the failures of ``key`` (it succeeded): its window is open again, whole."""
    await client.delete(PREFIX + key)
