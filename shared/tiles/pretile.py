"""Pre-tiling (spec 4.2): the plan under the tile cap, chunks of tiles, and their progress.

A run tiles zooms ``minzoom``..``maxzoom - 1`` over a coverage (:mod:`shared.tiles.coverage`:
the layer's footprint unless the run names another area): only the tiles that meet it. At most
:data:`MAX_TILES` tiles are made, but the first zoom is always tiled whole, and a later zoom
only when it fits whole under the cap; a plan above an absolute ceiling (whole first zoom
included) is refused. The work is cut into chunks (the covered tiles of a block of
:data:`CHUNK` x :data:`CHUNK` tiles, aligned to multiples of it) that any worker process
renders; they are produced lazily, from any position, so that no process ever holds the list of
a run's chunks. Counters in Redis add up what the chunks did,
and the chunk that completes the count ends the run (chunks whose worker died are delivered
again, so no chord has to wait for them). A lock in Redis lets one run per layer go at a time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis

from shared.errors import InvalidInputError, UnprocessableError
from shared.jobs import COUNT_IF_EXISTS, JobStore
from shared.tiles.coverage import Coverage
from shared.tiles.grid import MAX_ZOOM, TileAddress

__all__ = [
    "CHUNK",
    "DEFAULT_MAXZOOM",
    "DEFAULT_MINZOOM",
    "MAX_TILES",
    "PLAN_MAX_S",
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
#: seconds a plan may take to count its zooms: the zooms not counted by then are cut (a first
#: zoom not counted makes the plan too large)
PLAN_MAX_S = 3.0
DEFAULT_MINZOOM, DEFAULT_MAXZOOM = 6, 16
#: Side of a chunk, in tiles: the side of a metatile (``MAPSVC_METATILE_SIZE`` at most), so
#: that a chunk is drawn as one image (:mod:`shared.tiles.metatile`). 64 tiles take a worker
#: process well under a second, short enough that the last chunks of a run keep every process
#: busy; a chunk's bookkeeping (a message, a Redis script, a progress line) is lost in it.
CHUNK = 8
#: what a run covers: a coverage, or a footprint ``[west, south, east, north]`` (EPSG:4326)
Area = Coverage | Sequence[float]


@dataclass(frozen=True)
class Chunk:
    """The tiles a run makes in a block of one zoom, ``x0..x1`` and ``y0..y1`` inclusive:
    those whose bit ``(y - y0) * (x1 - x0 + 1) + (x - x0)`` is set in ``mask`` (None: all)."""

    z: int
    x0: int
    y0: int
    x1: int
    y1: int
    mask: int | None = None

    @property
    def size(self) -> int:
        """The number of tiles the run makes in the block."""
        if self.mask is not None:
            return self.mask.bit_count()
        return (self.x1 - self.x0 + 1) * (self.y1 - self.y0 + 1)

    def tiles(self) -> Iterator[TileAddress]:
        """The tiles the run makes in the block, row by row."""
        bit = 0
        for y in range(self.y0, self.y1 + 1):
            for x in range(self.x0, self.x1 + 1):
                if self.mask is None or self.mask >> bit & 1:
                    yield TileAddress(self.z, x, y)
                bit += 1


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


def _coverage(area: Area) -> Coverage:
    return area if isinstance(area, Coverage) else Coverage.box(area)


def plan_pretile(
    area: Area,
    minzoom: int,
    maxzoom: int,
    cap: int = MAX_TILES,
    ceiling: int | None = None,
) -> dict[str, Any]:
    """What a run tiles: the tiles per zoom that meet ``area``, and what the cap cut.

    Args:
        area: the coverage, or a footprint ``[west, south, east, north]``.
        minzoom: the first zoom.
        maxzoom: the end zoom (excluded).
        cap: most tiles of a run (the first zoom is tiled whole regardless).
        ceiling: most tiles of a run, whole first zoom included (see :func:`check_ceiling`).

    Returns:
        ``zooms`` (each ``zoom``, ``tiles`` (None: too many to count, see
        :meth:`Coverage.count`), ``tiled``), ``total`` (tiles to make), ``cut``
        (zooms left out), ``cap``, ``minzoom``, ``maxzoom``, ``ceiling`` and
        ``over_ceiling`` (whether ``total`` is above it, so the run would be refused).
    """
    check_zooms(minzoom, maxzoom)
    zooms: list[dict[str, Any]] = []
    cut: list[int] = []
    total = 0
    coverage = _coverage(area)
    uncounted = False
    deadline = time.monotonic() + PLAN_MAX_S
    for z in range(minzoom, maxzoom):
        # a zoom too large to count (None; so is every zoom below it) is cut; as the first zoom,
        # it makes the plan too large
        count = None if zooms and zooms[-1]["tiles"] is None else coverage.count(z, deadline)
        first = z == minzoom
        tiled = first or (not cut and count is not None and total + count <= cap)
        if tiled and count is not None:
            total += count
        elif tiled:
            uncounted = True
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
        "over_ceiling": uncounted or (ceiling is not None and total > ceiling),
    }


def check_ceiling(plan: dict[str, Any]) -> None:
    """Refuse a plan above its ceiling (a whole first zoom of billions of tiles, say).

    Raises:
        UnprocessableError: the plan is too large; its detail holds the plan, to narrow it.
    """
    if plan["over_ceiling"]:
        first = plan["zooms"][0]["tiles"]
        size = f"{plan['total']} tiles" if first is not None else "too large to count"
        raise UnprocessableError(
            f"the plan is {size}, above the ceiling of {plan['ceiling']} tiles"
            f" per run (its first zoom, {plan['minzoom']}, is always tiled whole): choose a"
            " lower minzoom (each zoom has four times the tiles of the one before)",
            plan=plan,
        )


def count_chunks(area: Area, plan: dict[str, Any]) -> int:
    """The number of chunks of the zooms a plan tiles."""
    coverage = _coverage(area)
    return sum(
        coverage.count_blocks(entry["zoom"], CHUNK) for entry in plan["zooms"] if entry["tiled"]
    )


def chunks(area: Area, plan: dict[str, Any], start: int = 0) -> Iterator[Chunk]:
    """The chunks of the zooms a plan tiles, one at a time, from the ``start``-th on.

    Chunks come zoom by zoom, each zoom's in the coverage's order of blocks (a block without a
    tile to make is no chunk); ``start`` skips whole zooms, and the blocks before it by their
    counts, without producing them, so a run's sender resumes anywhere at the same cost.
    """
    coverage = _coverage(area)
    for entry in plan["zooms"]:
        if not entry["tiled"]:
            continue
        z = entry["zoom"]
        count = coverage.count_blocks(z, CHUNK)
        if start >= count:
            start -= count
            continue
        for block in coverage.blocks(z, CHUNK, start):
            yield Chunk(z, *block)
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
