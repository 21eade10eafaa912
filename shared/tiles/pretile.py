"""Pre-tiling (spec 4.2): the plan under the tile cap, chunks of tiles, and their progress.

A run tiles zooms ``minzoom``..``maxzoom - 1`` over the layer's footprint. At most
:data:`MAX_TILES` tiles are made, but the first zoom is always tiled whole, and a later zoom
only when it fits whole under the cap; a plan above an absolute ceiling (whole first zoom
included) is refused. The work is cut into chunks (metatiles of :data:`CHUNK` x :data:`CHUNK`
tiles) that any worker process renders; they are produced lazily, from any position, so that
no process ever holds the list of a run's chunks. Counters in Redis add up what the chunks did,
and the chunk that completes the count ends the run (chunks whose worker died are delivered
again, so no chord has to wait for them). A lock in Redis lets one run per layer go at a time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import redis

from shared.errors import InvalidInputError, UnprocessableError
from shared.jobs import COUNT_IF_EXISTS, JobStore
from shared.tiles.grid import MAX_ZOOM, TMS, TileAddress

__all__ = [
    "CHUNK",
    "DEFAULT_MAXZOOM",
    "DEFAULT_MINZOOM",
    "MAX_TILES",
    "Chunk",
    "PretileCounters",
    "PretileLock",
    "check_ceiling",
    "check_zooms",
    "chunks",
    "count_chunks",
    "plan_pretile",
]

MAX_TILES = 100_000
DEFAULT_MINZOOM, DEFAULT_MAXZOOM = 6, 16
#: Side of a chunk, in tiles: 16 tiles take a worker process ~0.1 s, short enough that the
#: last chunks of a run keep every process busy, long enough that a chunk's bookkeeping (a
#: message, a Redis script, a progress line) costs ~1% of it.
CHUNK = 4
_LAT_LIMIT = 85.0511287798066


@dataclass(frozen=True)
class Chunk:
    """A block of tiles of one zoom, ``x0..x1`` and ``y0..y1`` inclusive."""

    z: int
    x0: int
    y0: int
    x1: int
    y1: int

    @property
    def size(self) -> int:
        """The number of tiles of the block."""
        return (self.x1 - self.x0 + 1) * (self.y1 - self.y0 + 1)

    def tiles(self) -> Iterator[TileAddress]:
        """The tiles of the block, row by row."""
        for y in range(self.y0, self.y1 + 1):
            for x in range(self.x0, self.x1 + 1):
                yield TileAddress(self.z, x, y)


def check_zooms(minzoom: int, maxzoom: int) -> None:
    """Refuse a zoom range that is empty or leaves the grid (zooms 0..24, end excluded).

    Raises:
        InvalidInputError: the range is bad.
    """
    if not 0 <= minzoom <= MAX_ZOOM:
        raise InvalidInputError(f"minzoom must be 0..{MAX_ZOOM}", parameter="minzoom")
    if not 0 <= maxzoom <= MAX_ZOOM + 1:
        raise InvalidInputError(
            f"maxzoom must be 1..{MAX_ZOOM + 1} (the end, excluded)", parameter="maxzoom"
        )
    if minzoom >= maxzoom:
        raise InvalidInputError(
            "minzoom must be below maxzoom (maxzoom is excluded)", parameter="minzoom"
        )


def _range(bounds: list[float], z: int) -> tuple[int, int, int, int]:
    west, south, east, north = bounds
    south, north = max(south, -_LAT_LIMIT), min(north, _LAT_LIMIT)
    top_left = TMS.tile(west, north, z)
    # a hair inside, so that a footprint ending on a tile edge does not take the next tile
    bottom_right = TMS.tile(east - 1e-9, south + 1e-9, z)
    return top_left.x, top_left.y, bottom_right.x, bottom_right.y


def plan_pretile(
    bounds: list[float],
    minzoom: int,
    maxzoom: int,
    cap: int = MAX_TILES,
    ceiling: int | None = None,
) -> dict[str, Any]:
    """What a run tiles: tiles per zoom over ``bounds`` (EPSG:4326), and what the cap cut.

    Args:
        bounds: the footprint, ``[west, south, east, north]``.
        minzoom: the first zoom.
        maxzoom: the end zoom (excluded).
        cap: most tiles of a run (the first zoom is tiled whole regardless).
        ceiling: most tiles of a run, whole first zoom included (see :func:`check_ceiling`).

    Returns:
        ``zooms`` (each ``zoom``, ``tiles``, ``tiled``), ``total`` (tiles to make), ``cut``
        (zooms left out), ``cap``, ``minzoom``, ``maxzoom``, ``ceiling`` and
        ``over_ceiling`` (whether ``total`` is above it, so the run would be refused).
    """
    check_zooms(minzoom, maxzoom)
    zooms: list[dict[str, Any]] = []
    cut: list[int] = []
    total = 0
    for z in range(minzoom, maxzoom):
        x0, y0, x1, y1 = _range(bounds, z)
        count = (x1 - x0 + 1) * (y1 - y0 + 1)
        tiled = z == minzoom or (not cut and total + count <= cap)
        if tiled:
            total += count
        else:
            cut.append(z)
        zooms.append({"zoom": z, "tiles": count, "tiled": tiled})
    return {
        "minzoom": minzoom,
        "maxzoom": maxzoom,
        "cap": cap,
        "zooms": zooms,
        "total": total,
        "cut": cut,
        "ceiling": ceiling,
        "over_ceiling": ceiling is not None and total > ceiling,
    }


def check_ceiling(plan: dict[str, Any]) -> None:
    """Refuse a plan above its ceiling (a whole first zoom of billions of tiles, say).

    Raises:
        UnprocessableError: the plan is too large; its detail holds the plan, to narrow it.
    """
    if plan["over_ceiling"]:
        raise UnprocessableError(
            f"the plan is {plan['total']} tiles, above the ceiling of {plan['ceiling']} tiles"
            f" per run (its first zoom, {plan['minzoom']}, is always tiled whole): choose a"
            " lower minzoom (each zoom has four times the tiles of the one before)",
            plan=plan,
        )


def _grid(bounds: list[float], z: int) -> tuple[int, int, int, int, int, int]:
    """The tile range of zoom ``z`` and its chunk columns and rows."""
    x0, y0, x1, y1 = _range(bounds, z)
    return x0, y0, x1, y1, -(-(x1 - x0 + 1) // CHUNK), -(-(y1 - y0 + 1) // CHUNK)


def count_chunks(bounds: list[float], plan: dict[str, Any]) -> int:
    """The number of chunks of the zooms a plan tiles."""
    count = 0
    for entry in plan["zooms"]:
        if entry["tiled"]:
            *_, cols, rows = _grid(bounds, entry["zoom"])
            count += cols * rows
    return count


def chunks(bounds: list[float], plan: dict[str, Any], start: int = 0) -> Iterator[Chunk]:
    """The chunks of the zooms a plan tiles, one at a time, from the ``start``-th on.

    Chunks come zoom by zoom, row by row; ``start`` skips whole zooms and rows without
    producing them, so a run's sender resumes anywhere at the same cost.
    """
    for entry in plan["zooms"]:
        if not entry["tiled"]:
            continue
        z = entry["zoom"]
        x0, y0, x1, y1, cols, rows = _grid(bounds, z)
        if start >= cols * rows:
            start -= cols * rows
            continue
        for i in range(start, cols * rows):
            cx, cy = x0 + i % cols * CHUNK, y0 + i // cols * CHUNK
            yield Chunk(z, cx, cy, min(cx + CHUNK - 1, x1), min(cy + CHUNK - 1, y1))
        start = 0


# KEYS: the run's hash, its set of counted chunks. ARGV: chunk id, chunk size, error, then the
# count fields, then their increments. Returns 1 when this chunk completed the run.
_ADD_CHUNK = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('EXPIRE', KEYS[2], redis.call('TTL', KEYS[1]))
redis.call('HDEL', KEYS[1], 'attempt:' .. ARGV[1])
local n = (#ARGV - 3) / 2
for i = 1, n do redis.call('HINCRBY', KEYS[1], ARGV[3 + i], ARGV[3 + n + i]) end
if ARGV[3] ~= '' then redis.call('HSETNX', KEYS[1], 'first_error', ARGV[3]) end
local finished = redis.call('HINCRBY', KEYS[1], 'finished_tiles', ARGV[2])
local plan = cjson.decode(redis.call('HGET', KEYS[1], 'plan'))
if finished >= plan['total'] then return 1 end
return 0
"""


#: what a chunk's tiles became, counted per zoom for the summary
_COUNTS = ("rendered", "skipped", "empty")


class PretileCounters:
    """What the chunks of a run did, added up in one Redis hash per run."""

    def __init__(self, client: redis.Redis, job_id: str, ttl_s: int) -> None:
        self.client = client
        self.key = f"mapsvc:pretile:{job_id}"
        self.ttl_s = ttl_s
        self._add = client.register_script(_ADD_CHUNK)
        self._attempt = client.register_script(COUNT_IF_EXISTS)

    def start(self, plan: dict[str, Any]) -> None:
        """Record the plan and the start time (kept when the plan task runs again)."""
        pipe = self.client.pipeline()
        pipe.hsetnx(self.key, "plan", json.dumps(plan))
        pipe.hsetnx(self.key, "started", repr(time.time()))
        pipe.expire(self.key, self.ttl_s)
        pipe.expire(f"{self.key}:chunks", self.ttl_s)
        pipe.execute()

    def attempt(self, chunk: Chunk) -> int:
        """Count a start of a chunk (a chunk whose worker died is delivered again).

        Returns:
            The starts of the chunk so far; 0 when the run's counters are gone (expired), so
            that a chunk delivered that late writes no key without a TTL.
        """
        field = f"attempt:{chunk.z}:{chunk.x0}:{chunk.y0}"
        return int(self._attempt(keys=[self.key], args=[field, self.ttl_s]))

    def add(
        self, chunk: Chunk, counts: dict[str, int], error: str | None = None, worker: str = ""
    ) -> bool:
        """Add what one chunk did (``rendered``, ``skipped``, ``empty``, ``cancelled``), once.

        A chunk counts once, however often it runs (a chunk whose worker died is delivered
        again, and a plan whose worker died is sent again): in one atomic step. Its tiles,
        cancelled ones too, count towards the end of the run; the summary counts the rest,
        and, when ``worker`` names the worker that did the chunk, what each worker did.

        Returns:
            Whether this chunk completed the run (every tile of the plan accounted for).
        """
        fields = [f"z:{chunk.z}:{name}" for name in _COUNTS]
        values = [counts.get(name, 0) for name in _COUNTS]
        if worker:
            fields += [f"worker:{worker}:chunks", f"worker:{worker}:rendered"]
            values += [1, counts.get("rendered", 0)]
        if error is not None:
            fields.append(f"z:{chunk.z}:errors")
            values.append(1)
        return self._count(f"{chunk.z}:{chunk.x0}:{chunk.y0}", chunk.size, error, fields, values)

    def add_rest(self, tiles: int) -> bool:
        """Count the ``tiles`` of the chunks never sent (the run was cancelled), once.

        Returns:
            Whether this completed the run.
        """
        return self._count("rest", tiles, None, [], [])

    def _count(
        self, member: str, size: int, error: str | None, fields: list[str], values: list[int]
    ) -> bool:
        last = self._add(
            keys=[self.key, f"{self.key}:chunks"],
            args=[member, size, error or "", *fields, *values],
        )
        return bool(last)

    def summary(self) -> dict[str, Any]:
        """The plan, per-zoom counts, totals and the seconds since the start."""
        data: dict[str, str] = self.client.hgetall(self.key)  # type: ignore[assignment]
        plan = json.loads(data["plan"])
        zooms = []
        for entry in plan["zooms"]:
            if not entry["tiled"]:
                continue
            z = entry["zoom"]
            counts = {n: int(data.get(f"z:{z}:{n}", 0)) for n in (*_COUNTS, "errors")}
            zooms.append({"zoom": z, "tiles": entry["tiles"], **counts})
        done = sum(z["rendered"] + z["skipped"] for z in zooms)
        workers: dict[str, dict[str, int]] = {}
        for field, value in data.items():
            if field.startswith("worker:"):
                name, count = field[len("worker:") :].rsplit(":", 1)
                workers.setdefault(name, {"chunks": 0, "rendered": 0})[count] = int(value)
        return {
            "plan": plan,
            "zooms": zooms,
            "workers": dict(sorted(workers.items())),
            "rendered": sum(z["rendered"] for z in zooms),
            "skipped": sum(z["skipped"] for z in zooms),
            "empty": sum(z["empty"] for z in zooms),
            "done": done,
            "seconds": round(time.time() - float(data["started"]), 3),
            "first_error": data.get("first_error"),
        }

    def progress_line(self, z: int) -> tuple[str, float]:
        """The line after a chunk of zoom ``z``: done/total, tiles per second, ETA; progress."""
        s = self.summary()
        zoom = next(item for item in s["zooms"] if item["zoom"] == z)
        zoom_done = zoom["rendered"] + zoom["skipped"]
        rate = s["done"] / s["seconds"] if s["seconds"] > 0 else 0.0
        total = s["plan"]["total"]
        eta = (total - s["done"]) / rate if rate > 0 else 0.0
        text = f"Zoom {z}: {zoom_done}/{zoom['tiles']} tiles, {rate:.1f} tiles/s, ETA {eta:.0f}s"
        return text, (s["done"] / total if total else 1.0)


# KEYS: the lock. ARGV: the holder expected, the new holder ('' to release), the TTL.
# Returns 1 when the lock was held by the holder expected (and is now changed).
_SWAP_HOLDER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1])
else redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3]) end
return 1
"""

#: seconds a lock may name a job whose record is not written yet (it is being enqueued)
_ENQUEUE_GRACE_S = 30


class PretileLock:
    """At most one pre-tiling run per layer: a Redis key naming the job that holds it.

    The task that ends a run releases the lock; a lock whose job has ended anyway (a
    watchdog, a cancelled queued job, a failure the API wrote) or whose record expired does
    not block the next run, and the key expires by itself (the run refreshes it as it goes).
    """

    def __init__(self, store: JobStore, style: str, ttl_s: int) -> None:
        self.store = store
        self.key = f"mapsvc:pretile-lock:{style}"
        self.ttl_s = ttl_s
        self._swap = store.client.register_script(_SWAP_HOLDER)

    def acquire(self, job_id: str) -> str | None:
        """Take the lock for ``job_id`` (about to be enqueued, or starting).

        Returns:
            None when the lock is now the job's; else the id of the job running the layer
            (``job_id`` itself when it holds the lock already).
        """
        while True:
            if self.store.client.set(self.key, job_id, nx=True, ex=self.ttl_s):
                return None
            holder = cast(str | None, self.store.client.get(self.key))
            if holder is None:
                continue  # released meanwhile
            if self._running(holder):
                return holder
            if self._swap(keys=[self.key], args=[holder, job_id, self.ttl_s]):
                return None

    def _running(self, holder: str) -> bool:
        record = self.store.get(holder)
        if record is None:
            age = self.ttl_s - self.store.client.ttl(self.key)
            return age < _ENQUEUE_GRACE_S
        return record.outcome is None

    def refresh(self, job_id: str) -> None:
        """Keep the lock of a run that is still going (only while the job holds it)."""
        self._swap(keys=[self.key], args=[job_id, job_id, self.ttl_s])

    def release(self, job_id: str) -> None:
        """Free the layer, if ``job_id`` still holds it."""
        self._swap(keys=[self.key], args=[job_id, "", self.ttl_s])
