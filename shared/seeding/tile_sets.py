"""Sets of tiles across zooms that truncation and expiry remove from the caches (issue 25).

A set answers, per zoom, whether given tiles belong to it (:meth:`TileSet.meets`, arrays at
once), the columns its tiles lie in (:meth:`TileSet.columns`: where a walk of the cache looks),
and how many tiles it has (:meth:`TileSet.count`, for a dry run). Two kinds:

- :class:`CoverageTiles`: the tiles meeting a coverage (:mod:`shared.seeding.coverage`), or every
  tile of the grid when there is none;
- :class:`ListedTiles`: an expiry list (osm2pgsql's ``z/x/y`` lines): each tile listed, its
  parents at every zoom above it and its children at every zoom below it, as mod_tile's
  ``render_expired`` expires them. A tile whose parent is listed too adds nothing and is
  dropped, so the children of the tiles kept are disjoint and counted by arithmetic.

Both travel in a job's parameters as JSON (:meth:`TileSet.to_json`, :func:`tile_set_from_json`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np

from shared.base.grid import MAX_ZOOM, TileAddress
from shared.seeding.coverage import Coverage

__all__ = ["CoverageTiles", "ListedTiles", "TileSet", "tile_set_from_json"]

#: bits of a row in a packed tile (``x << _ROW_BITS | y``): rows are below ``2**MAX_ZOOM``
_ROW_BITS = MAX_ZOOM + 1
_TILE_PX = 256


class TileSet(Protocol):
    """Tiles across zooms."""

    def count(self, zoom: int, deadline: float | None = None) -> int | None:
        """Its tiles of ``zoom``; None when too many to count by ``deadline``."""

    def columns(self, zoom: int) -> list[tuple[int, int]]:
        """The columns of ``zoom`` its tiles lie in: sorted, disjoint, inclusive ranges (a
        superset is allowed)."""

    def meets(self, zoom: int, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Which tiles ``x``, ``y`` of ``zoom`` (arrays of one length) are in it."""

    def to_json(self) -> dict[str, Any]:
        """The set as JSON (:func:`tile_set_from_json` reads it)."""


class CoverageTiles:
    """The tiles meeting a coverage; with none, every tile of the grid."""

    def __init__(self, coverage: Coverage | None) -> None:
        self.coverage = coverage

    def count(self, zoom: int, deadline: float | None = None) -> int | None:
        """See :meth:`TileSet.count` (a coverage counts by walking its edge:
        :meth:`Coverage.count`)."""
        if self.coverage is None:
            return int(4**zoom)
        return self.coverage.count(zoom, deadline)

    def columns(self, zoom: int) -> list[tuple[int, int]]:
        """The columns of the coverage's bounds grown by its buffer (every one without)."""
        n = 1 << zoom
        if self.coverage is None:
            return [(0, n - 1)]
        west, _, east, _ = self.coverage.bounds
        grow = self.coverage.buffer / _TILE_PX
        x0 = max(0, math.floor((west + 180) / 360 * n - grow))
        x1 = min(n - 1, math.floor((east + 180) / 360 * n + grow))
        return [(x0, x1)] if x0 <= x1 else []

    def meets(self, zoom: int, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """See :meth:`TileSet.meets`."""
        if self.coverage is None:
            return np.ones(len(x), dtype=bool)
        return self.coverage.meets(zoom, x, y)

    def to_json(self) -> dict[str, Any]:
        """``{"coverage": <Coverage.to_json(), or null for every tile>}``."""
        return {"coverage": None if self.coverage is None else self.coverage.to_json()}


def _pack(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    packed: np.ndarray = (x.astype(np.int64) << _ROW_BITS) | y.astype(np.int64)
    return packed


class ListedTiles:
    """The tiles of an expiry list, with their parents and children at every zoom."""

    def __init__(self, tiles: Iterable[TileAddress]) -> None:
        by_zoom: dict[int, list[tuple[int, int]]] = {}
        for tile in tiles:
            by_zoom.setdefault(tile.z, []).append((tile.x, tile.y))
        #: the tiles kept (none of them below another), packed, sorted, per zoom
        self._listed: dict[int, np.ndarray] = {}
        for z in sorted(by_zoom):
            xy = np.array(by_zoom[z], dtype=np.int64)
            x, y = xy[:, 0], xy[:, 1]
            below = np.zeros(len(x), dtype=bool)
            for above, packed in self._listed.items():
                below |= np.isin(_pack(x >> (z - above), y >> (z - above)), packed)
            kept = np.unique(_pack(x[~below], y[~below]))
            if len(kept):
                self._listed[z] = kept
        self._exact: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        """The tiles kept from the list (those below another listed tile left out)."""
        return sum(len(packed) for packed in self._listed.values())

    def _at(self, zoom: int) -> np.ndarray:
        """The packed tiles of ``zoom`` listed, or parents of tiles listed below it."""
        found = self._exact.get(zoom)
        if found is None:
            parts = [
                _pack((p >> _ROW_BITS) >> (z - zoom), (p & ((1 << _ROW_BITS) - 1)) >> (z - zoom))
                for z, p in self._listed.items()
                if z >= zoom
            ]
            found = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
            self._exact[zoom] = found
        return found

    def count(self, zoom: int, deadline: float | None = None) -> int | None:
        """See :meth:`TileSet.count`: exact, by arithmetic (the children of the tiles kept are
        disjoint, and none is a parent of another's)."""
        children = sum(len(p) << 2 * (zoom - z) for z, p in self._listed.items() if z < zoom)
        return len(self._at(zoom)) + children

    def columns(self, zoom: int) -> list[tuple[int, int]]:
        """The columns of the tiles listed and their parents, and the column ranges of the
        children of those listed above ``zoom``."""
        starts = [self._at(zoom) >> _ROW_BITS]
        ends = [starts[0]]
        for z, packed in self._listed.items():
            if z < zoom:
                x = packed >> _ROW_BITS
                starts.append(x << (zoom - z))
                ends.append(((x + 1) << (zoom - z)) - 1)
        start, end = np.concatenate(starts), np.concatenate(ends)
        order = np.argsort(start, kind="stable")
        merged: list[tuple[int, int]] = []
        for a, b in zip(start[order].tolist(), end[order].tolist(), strict=True):
            if merged and a <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        return merged

    def meets(self, zoom: int, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """See :meth:`TileSet.meets`."""
        x, y = x.astype(np.int64), y.astype(np.int64)
        found: np.ndarray = np.isin(_pack(x, y), self._at(zoom))
        for z, packed in self._listed.items():
            if z < zoom:
                found |= np.isin(_pack(x >> (zoom - z), y >> (zoom - z)), packed)
        return found

    def names(self) -> list[str]:
        """The tiles kept, as ``z/x/y`` lines."""
        mask = (1 << _ROW_BITS) - 1
        return [
            f"{z}/{p >> _ROW_BITS}/{p & mask}"
            for z, packed in self._listed.items()
            for p in packed.tolist()
        ]

    def to_json(self) -> dict[str, Any]:
        """``{"tiles": ["z/x/y", …]}``: the tiles kept."""
        return {"tiles": self.names()}


def tile_set_from_json(data: dict[str, Any]) -> TileSet:
    """The set :meth:`TileSet.to_json` gave."""
    if "tiles" in data:
        return ListedTiles(
            TileAddress(*(int(part) for part in name.split("/"))) for name in data["tiles"]
        )
    coverage = data.get("coverage")
    return CoverageTiles(None if coverage is None else Coverage.from_json(coverage))
