"""Answers of vector layers (tiles, GeoJSON) cached in Redis, dropped when the data changes.

A key holds the layer's data version: the table's insert/update/delete counters from
PostgreSQL's statistics (they move a moment after a write commits), and an epoch that
:meth:`VectorCache.drop` advances (the admin call, and the only way for a view's data). A
watched layer's version is its epoch alone (:data:`WATCHED_KEY` lists them): its follower
(:mod:`shared.seeding.follow`) drops the answers a change made stale, and only those, so an
edit in one place keeps every other tile cached.
All answers together stay within a byte budget (:class:`shared.cache.ByteBudget`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio as aioredis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.base.grid import TileAddress
from shared.cache import ByteBudget
from shared.vector.catalog import VectorLayer

__all__ = [
    "VERSION_EVERY_S",
    "WATCHED_KEY",
    "VectorCache",
    "drop_cached_tiles",
]

VERSION_EVERY_S = 1.0
#: the byte budget of the cache's answers (:class:`shared.cache.ByteBudget`)
_BUDGET = "vector"
#: the kind of a vector tile's answer, in its key
TILE_KIND = "mvt"
#: the set of the watched layers' ids (kept by the follower and ``mapsvc watch``)
WATCHED_KEY = "mapsvc:watch:layers"

_VERSION_SQL = text(
    """
    SELECT coalesce(n_tup_ins, 0) || '.' || coalesce(n_tup_upd, 0) || '.' || coalesce(n_tup_del, 0)
    FROM pg_stat_user_tables WHERE schemaname = :schema AND relname = :table
    """
)


class VectorCache:
    """Cached answers of vector layers."""

    def __init__(self, client: aioredis.Redis, ttl_s: int, max_bytes: int) -> None:
        self.client = client
        self.ttl_s = ttl_s
        self.budget = ByteBudget(_BUDGET, max_bytes)
        self._versions: dict[str, tuple[float, str]] = {}
        self._watched: set[str] = set()

    async def version(self, engine: AsyncEngine, layer: VectorLayer) -> str:
        """The layer's data version (changes when its rows change, or on :meth:`drop`).

        Read again at most every :data:`VERSION_EVERY_S` per process, so that a request does
        not pay a statistics query each time.
        """
        known = self._versions.get(layer.id)
        if known is not None and time.monotonic() - known[0] < VERSION_EVERY_S:
            return known[1]
        pipe = self.client.pipeline(transaction=False)
        pipe.get(f"mapsvc:vector:epoch:{layer.id}")
        pipe.sismember(WATCHED_KEY, layer.id)
        got, watched = await pipe.execute()
        epoch = str(got or "0")
        (self._watched.add if watched else self._watched.discard)(layer.id)
        if watched:
            version = f"watched.{epoch}"
        elif layer.is_view:
            version = f"view.{epoch}"
        else:
            async with engine.connect() as conn:
                params = {"schema": layer.schema, "table": layer.table}
                stats = (await conn.execute(_VERSION_SQL, params)).scalar()
            version = f"{stats}.{epoch}"
        self._versions[layer.id] = (time.monotonic(), version)
        return version

    async def watched(self, engine: AsyncEngine, layer: VectorLayer) -> bool:
        """Whether the layer is watched (as its version was read: at most
        :data:`VERSION_EVERY_S` ago)."""
        await self.version(engine, layer)
        return layer.id in self._watched

    def key(
        self,
        kind: str,
        layer: VectorLayer,
        version: str,
        request: dict[str, Any],
        tile: TileAddress | None = None,
    ) -> str:
        """The key of one answer: ``request`` holds the parsed, normalised parameters only; the
        key of a tile names it (``…:<z>/<x>/<y>:<digest>``), so that expiry finds it."""
        digest = hashlib.sha256(json.dumps(request, sort_keys=True, default=str).encode())
        where = "" if tile is None else f"{tile.z}/{tile.x}/{tile.y}:"
        return f"mapsvc:vector:{kind}:{layer.id}:{version}:{where}{digest.hexdigest()[:32]}"

    async def get(self, key: str) -> bytes | None:
        """A cached answer."""
        value = await self.client.get(key)
        return None if value is None else base64.b64decode(value)

    async def put(self, key: str, data: bytes) -> None:
        """Keep an answer for the TTL, within the cache's byte budget."""
        if self.ttl_s > 0:
            await self.budget.aput(self.client, key, base64.b64encode(data).decode(), self.ttl_s)

    async def drop(self, layer: VectorLayer) -> int:
        """Forget every cached answer of a layer; returns the layer's new epoch."""
        epoch: int = await self.client.incr(f"mapsvc:vector:epoch:{layer.id}")
        self._versions.pop(layer.id, None)
        return epoch


def drop_cached_tiles(
    client: redis.Redis,
    layer_id: str,
    wanted: Callable[[TileAddress], bool],
    *,
    answers: bool = False,
) -> list[TileAddress]:
    """Forget the cached tiles of a layer that ``wanted`` picks, in every data version of it,
    and with ``answers`` every other cached answer of it too (GeoJSON pages, OGC items: what
    a change of its data makes stale).

    The cache's books (:class:`ByteBudget`) list every answer it holds: the layer's are read
    there in one pass (``ZSCAN``, never the whole key space), and dropped from the books too.

    Args:
        client: a Redis client that decodes responses.
        layer_id: the vector layer's id.
        wanted: whether a cached tile is to go.
        answers: its answers that are not tiles go too.

    Returns:
        The tiles dropped (one per answer: a tile asked with other parameters counts again).
    """
    budget = ByteBudget(_BUDGET, 0)
    match = f"mapsvc:vector:*:{_glob_escape(layer_id)}:*"
    keys, tiles = [], []
    for found, _ in client.zscan_iter(budget.books[0], match=match, count=1000):
        key = str(found)
        parts = key.split(":")
        if len(parts) < 5 or parts[3] != layer_id:
            continue  # another layer's, whose id ends as this one's
        if parts[2] != TILE_KIND:
            if answers:
                keys.append(key)
            continue
        name = key.rsplit(":", 2)
        if len(name) != 3 or name[1].count("/") != 2:
            continue  # an answer cached before tiles were named in keys
        tile = TileAddress(*(int(part) for part in name[1].split("/")))
        if wanted(tile):
            keys.append(key)
            tiles.append(tile)
    budget.drop(client, keys)
    return tiles


def _glob_escape(text: str) -> str:
    """``text`` matched literally by a Redis ``MATCH`` pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)
