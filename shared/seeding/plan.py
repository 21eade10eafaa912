"""Pre-tiling's plan (spec 4.2), pure: the tiles of a coverage under the tile cap, and their
chunks.

A run tiles zooms ``minzoom``..``maxzoom - 1`` over a coverage (:mod:`shared.seeding.coverage`:
the layer's footprint unless the run names another area): only the tiles that meet it. At most
:data:`MAX_TILES` tiles are made, but the first zoom is always tiled whole, and a later zoom
only when it fits whole under the cap; a plan above an absolute ceiling (whole first zoom
included) is refused. The work is cut into chunks (the covered tiles of a block of
:data:`CHUNK` x :data:`CHUNK` tiles, aligned to multiples of it) that any worker process
renders; they are produced lazily, from any position, so that no process ever holds the list of
a run's chunks. Their state in Redis is :mod:`shared.seeding.pretile`'s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from shared.base.grid import MAX_ZOOM, TileAddress
from shared.errors import (
    InvalidInputError,
    UnprocessableError,
)
from shared.seeding.coverage import Coverage

__all__ = [
    "DEFAULT_MAXZOOM",
    "DEFAULT_MINZOOM",
    "Area",
    "CHUNK",
    "Chunk",
    "MAX_TILES",
    "PLAN_MAX_S",
    "check_ceiling",
    "check_pace",
    "check_zooms",
    "chunks",
    "count_chunks",
    "plan_pretile",
    "slowest_pace",
    "tile_name",
]

DEFAULT_MINZOOM, DEFAULT_MAXZOOM = 6, 16
#: what a run covers: a coverage, or a footprint ``[west, south, east, north]`` (EPSG:4326)
Area = Coverage | Sequence[float]


MAX_TILES = 100_000


#: seconds a plan may take to count its zooms: the zooms not counted by then are cut (a first
#: zoom not counted makes the plan too large)
PLAN_MAX_S = 3.0


#: Side of a chunk, in tiles: the side of a metatile (``MAPSVC_METATILE_SIZE`` at most), so
#: that a chunk is drawn as one image (:mod:`shared.tiles.metatile`). 64 tiles take a worker
#: process well under a second, short enough that the last chunks of a run keep every process
#: busy; a chunk's bookkeeping (a message, a Redis script, a progress line) is lost in it.
CHUNK = 8


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


def slowest_pace(stall_s: float) -> float:
    """The least ``max_tiles_per_s`` of a run: its sender queues the step after a chunk of
    ``CHUNK * CHUNK`` tiles that many tiles' time later, and a run silent for ``stall_s``
    (``MAPSVC_JOB_STALL_S``) is ended by the watchdog; a step comes within half of it."""
    return 2 * CHUNK * CHUNK / stall_s


def check_pace(tiles_per_s: float, stall_s: float) -> None:
    """Refuse a pace so slow that the run would fall silent for ``stall_s`` between two steps
    (or past what a task's countdown can hold), locking its layer until the watchdog ends it.

    Raises:
        InvalidInputError: ``tiles_per_s`` is below :func:`slowest_pace` (``parameter``:
            ``max_tiles_per_s``).
    """
    least = slowest_pace(stall_s)
    if tiles_per_s < least:
        raise InvalidInputError(
            f"max_tiles_per_s must be at least {least:.3g}: a run sends a chunk of up to"
            f" {CHUNK * CHUNK} tiles at a time, and one silent for MAPSVC_JOB_STALL_S"
            f" ({stall_s:g} s) is ended",
            parameter="max_tiles_per_s",
            least=round(least, 6),
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


def tile_name(tile: TileAddress) -> str:
    """A tile as a line of a tile list (``z/x/y``, osm2pgsql's expiry format)."""
    return f"{tile.z}/{tile.x}/{tile.y}"
