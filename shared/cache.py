"""Caches in Redis, each held to a byte budget; JSON results keyed by what they depend on.

Redis is also the broker and the job store, so a cache must never grow into their room: each
cache (:class:`ByteBudget`) books its entries in a sorted set by expiry time, with their sizes
in a hash and the total in a counter, and one Lua script stores an entry and evicts the
cache's own entries (those expiring soonest first) until it fits, atomically. Redis runs
with ``maxmemory-policy noeviction`` (docs/safety.md "Vector answers, caches and links"), so Redis
itself never drops a queue or a job record to make room.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis

__all__ = ["ENTRY_OVERHEAD", "ByteBudget", "cached_json"]

#: bytes booked per entry beside its key and value: its place in the books (sorted set, hash)
ENTRY_OVERHEAD = 128

# KEYS: entry, books (sorted set: entry -> expiry ms), sizes (hash: entry -> bytes), total
# ARGV: value, ttl ms, budget bytes, now ms, overhead bytes per entry
# Evicted entries are named by the books, not by KEYS: fine on one Redis, not on a cluster.
_PUT = """
local entry, books, sizes, total = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ttl, budget, now = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local cost = string.len(ARGV[1]) + string.len(entry) + tonumber(ARGV[5])
local function unbook(key)
  local size = redis.call('HGET', sizes, key)
  if size then
    redis.call('DECRBY', total, size)
    redis.call('HDEL', sizes, key)
  end
  redis.call('ZREM', books, key)
end
-- entries past their TTL are gone from Redis already: take them off the books
for _, key in ipairs(redis.call('ZRANGEBYSCORE', books, '-inf', now, 'LIMIT', 0, 1000)) do
  unbook(key)
end
unbook(entry)
if cost > budget then
  redis.call('DEL', entry)
  return 0
end
local used = tonumber(redis.call('GET', total) or '0')
while used + cost > budget do
  local first = redis.call('ZRANGE', books, 0, 0)[1]
  if not first then  -- nothing left to evict: the counter drifted, start it again
    redis.call('DEL', total)
    break
  end
  used = used - tonumber(redis.call('HGET', sizes, first) or '0')
  unbook(first)
  redis.call('DEL', first)
end
redis.call('SET', entry, ARGV[1], 'PX', ttl)
redis.call('ZADD', books, now + ttl, entry)
redis.call('HSET', sizes, entry, cost)
redis.call('INCRBY', total, cost)
-- the books live as long as their last entry
for _, key in ipairs({books, sizes, total}) do
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end
return 1
"""

# KEYS: books, sizes, total, then the entries to drop. Returns how many of them were stored.
_DROP = """
local books, sizes, total = KEYS[1], KEYS[2], KEYS[3]
local dropped = 0
for i = 4, #KEYS do
  local size = redis.call('HGET', sizes, KEYS[i])
  if size then
    redis.call('DECRBY', total, size)
    redis.call('HDEL', sizes, KEYS[i])
  end
  redis.call('ZREM', books, KEYS[i])
  dropped = dropped + redis.call('DEL', KEYS[i])
end
return dropped
"""
#: entries dropped by one call of the script
_DROP_BATCH = 500


@dataclass(frozen=True)
class ByteBudget:
    """One cache's entries in Redis, kept under ``max_bytes`` (key, value and bookkeeping).

    Reads are plain ``GET``; writes go through :meth:`put` or :meth:`aput`.
    """

    name: str
    max_bytes: int

    @property
    def books(self) -> list[str]:
        """The keys of the cache's books: entries by expiry, their sizes, the total."""
        prefix = f"mapsvc:budget:{self.name}"
        return [f"{prefix}:entries", f"{prefix}:sizes", f"{prefix}:bytes"]

    def _call(self, key: str, value: str | bytes, ttl_s: float) -> tuple[list[str], list[Any]]:
        now_ms = int(time.time() * 1000)
        ttl_ms = max(1, int(ttl_s * 1000))
        return [key, *self.books], [value, ttl_ms, self.max_bytes, now_ms, ENTRY_OVERHEAD]

    def put(self, client: redis.Redis, key: str, value: str | bytes, ttl_s: float) -> bool:
        """Store an entry for ``ttl_s``, evicting older entries of this cache to make room.

        Returns:
            False when the entry alone is larger than the budget (then it is not stored).
        """
        keys, args = self._call(key, value, ttl_s)
        return bool(client.register_script(_PUT)(keys=keys, args=args))

    async def aput(
        self, client: aioredis.Redis, key: str, value: str | bytes, ttl_s: float
    ) -> bool:
        """:meth:`put` with an asyncio client."""
        keys, args = self._call(key, value, ttl_s)
        return bool(await client.register_script(_PUT)(keys=keys, args=args))

    def drop(self, client: redis.Redis, keys: list[str]) -> int:
        """Remove entries of this cache, and take them off its books; how many were stored."""
        script = client.register_script(_DROP)
        dropped = 0
        for i in range(0, len(keys), _DROP_BATCH):
            dropped += int(script(keys=[*self.books, *keys[i : i + _DROP_BATCH]]))
        return dropped

    def used_bytes(self, client: redis.Redis) -> int:
        """The bytes booked now (entries past their TTL count until the next write)."""
        return int(client.get(self.books[2]) or 0)


def cached_json(
    client: redis.Redis,
    kind: str,
    depends_on: Any,
    compute: Callable[[], Any],
    *,
    ttl_s: int,
    max_bytes: int,
    refresh: bool = False,
) -> Any:
    """The cached value for ``depends_on``, or ``compute()`` stored for next time.

    Args:
        client: a Redis client that decodes responses.
        kind: what is cached (part of the key, e.g. ``raster-info``).
        depends_on: JSON-able inputs; a change in any gives another key.
        compute: makes the value (JSON-able) on a miss.
        ttl_s: how long a value is kept.
        max_bytes: the byte budget of all cached results (the ``results`` cache).
        refresh: compute and store again even on a hit (``nocache=1``).

    Returns:
        The value.
    """
    digest = hashlib.sha256(json.dumps(depends_on, sort_keys=True, default=str).encode())
    key = f"mapsvc:cache:{kind}:{digest.hexdigest()}"
    if not refresh:
        hit = client.get(key)
        if hit is not None:
            return json.loads(str(hit))
    value = compute()
    ByteBudget("results", max_bytes).put(client, key, json.dumps(value), ttl_s)
    return value
