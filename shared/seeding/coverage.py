"""Coverages (issue 25): the area a pre-tiling run tiles, and the tiles of each zoom that meet it.

A coverage is a box or a (Multi)Polygon in EPSG:4326, and a buffer in pixels. It is made from a
``bbox`` in any CRS (its edges densified, then transformed), from a GeoJSON geometry (checked:
type, rings, coordinates, at most :data:`MAX_VERTICES` vertices, valid), or from the union of
the matching rows of a vector layer of ours (:func:`layer_coverage`); without one, a run covers
the layer's footprint. A tile meets the coverage when the tile, grown by the buffer (pixels of
its zoom, on each side), shares more than its edge with it.

The tiles of a zoom are found as mapproxy-seed finds them: walking the pyramid from zoom 0,
dropping every subtree whose tile misses the coverage, and not testing below a tile the
coverage holds whole (all of its subtree meets it). The work is the tiles along the coverage's
edge, never the tiles inside; shapely tests the tiles of a level at once against the prepared
geometry. Blocks of tiles (a pre-tiling run's chunks) come in a fixed order, lazily, from any
position: the subtrees before the position are skipped by their counts, never listed.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np
import psycopg
import shapely  # type: ignore[import-untyped]
import shapely.geometry  # type: ignore[import-untyped]
from pyproj import Transformer
from shapely.geometry.base import BaseGeometry  # type: ignore[import-untyped]
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.base.grid import TileAddress
from shared.errors import InvalidInputError, UnprocessableError
from shared.params import parse_bbox
from shared.vector.catalog import VectorLayer, ident
from shared.vector.cql import parse_cql, refusing
from shared.vector.db import pyformat, read_pool
from shared.vector.features import db_error
from shared.vector.query import LayerQuery, where_sql

__all__ = [
    "MAX_BUFFER",
    "MAX_EDGE",
    "MAX_VERTICES",
    "Block",
    "Coverage",
    "layer_coverage",
]

#: most vertices of a coverage's geometry (it travels in the job's parameters, ~40 bytes each)
MAX_VERTICES = 10_000
#: most tiles along a coverage's edge at one zoom that a plan counts (a zoom with more has more
#: tiles than a run's cap: it is cut, or refused as a first zoom, uncounted)
MAX_EDGE = 1 << 14
#: most pixels of a coverage's buffer (a tile's side)
MAX_BUFFER = 256
_TILE_PX = 256
#: points per edge of a densified ``bbox`` of another CRS
_DENSIFY = 64
_WGS84 = ("EPSG:4326", "CRS:84", "OGC:CRS84")
_TYPES = ("Polygon", "MultiPolygon")


class Block(NamedTuple):
    """Tiles of one zoom, ``x0..x1`` and ``y0..y1`` inclusive, that meet a coverage: those whose
    bit ``(y - y0) * (x1 - x0 + 1) + (x - x0)`` is set in ``mask`` (None: every one)."""

    x0: int
    y0: int
    x1: int
    y1: int
    mask: int | None


def _lat(y: np.ndarray, n: int) -> np.ndarray:
    """The latitude of the row edge ``y`` (a fraction of rows) of a level of ``n`` rows."""
    lat: np.ndarray = np.degrees(np.arctan(np.sinh(np.pi * (1 - 2 * np.clip(y, 0, n) / n))))
    return lat


def _boxes(
    q: int, x: np.ndarray, y: np.ndarray, grow: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """West, south, east, north of the tiles ``x``, ``y`` of level ``q``, each side moved out by
    ``grow`` tiles."""
    n = 2**q
    west, east = (x - grow) * 360.0 / n - 180.0, (x + 1 + grow) * 360.0 / n - 180.0
    return west, _lat(y + 1 + grow, n), east, _lat(y - grow, n)


@dataclass(frozen=True, eq=False)
class Coverage:
    """An area of EPSG:4326 and a buffer: ``bounds`` (west, south, east, north), and
    ``geometry`` (a prepared (Multi)Polygon) unless the area is that box.
    """

    bounds: tuple[float, float, float, float]
    geometry: BaseGeometry | None = None
    buffer: int = 0
    #: the vector layer whose polygons it is (``coverage_layer``): who may not see that layer
    #: is not shown its geometry
    layer: str | None = None

    # -- making one -------------------------------------------------------------------------

    @classmethod
    def box(cls, bounds: Sequence[float], buffer: int = 0) -> Coverage:
        """The box ``[west, south, east, north]`` (a layer's footprint, say)."""
        west, south, east, north = (float(v) for v in bounds)
        return cls((west, south, east, north), None, _buffer(buffer))

    @classmethod
    def of_geometry(cls, geometry: BaseGeometry, buffer: int = 0) -> Coverage:
        """A (Multi)Polygon of EPSG:4326 (checked valid by the caller); a box when it is one."""
        bounds = tuple(float(v) for v in geometry.bounds)
        if shapely.equals(geometry, shapely.box(*bounds)):
            return cls.box(bounds, buffer)
        shapely.prepare(geometry)
        return cls(bounds, geometry, _buffer(buffer))  # type: ignore[arg-type]

    @classmethod
    def of_bbox(cls, text: str, crs: str = "EPSG:4326", buffer: int = 0) -> Coverage:
        """``minx,miny,maxx,maxy`` in ``crs``: its edges densified and transformed.

        Raises:
            InvalidInputError: not a box inside the CRS's area (``parameter`` ``bbox``).
        """
        x0, y0, x1, y1 = parse_bbox(text, "bbox", crs)
        if crs.upper() in _WGS84:
            return cls.box((x0, y0, x1, y1), buffer)
        t = np.linspace(0.0, 1.0, _DENSIFY, endpoint=False)
        xs = np.concatenate(
            [x0 + (x1 - x0) * t, np.full_like(t, x1), x1 - (x1 - x0) * t, np.full_like(t, x0)]
        )
        ys = np.concatenate(
            [np.full_like(t, y0), y0 + (y1 - y0) * t, np.full_like(t, y1), y1 - (y1 - y0) * t]
        )
        lon, lat = Transformer.from_crs(crs, "EPSG:4326", always_xy=True).transform(xs, ys)
        shape = shapely.Polygon(np.column_stack([lon, lat]))
        if not (np.isfinite(lon).all() and np.isfinite(lat).all() and shape.is_valid):
            raise InvalidInputError(f"bbox cannot be transformed from {crs}", parameter="bbox")
        return cls.of_geometry(shape, buffer)

    @classmethod
    def of_geojson(cls, data: Any, buffer: int = 0, parameter: str = "body") -> Coverage:
        """A GeoJSON Polygon or MultiPolygon, or a Feature of one, in EPSG:4326.

        Checked before any geometry is built, stopping at the first fault: the type, each ring
        (a closed list of at least 4 positions), each position (2 or 3 finite numbers, a
        longitude and a latitude), at most :data:`MAX_VERTICES` vertices; then its validity
        (no self-intersection).

        Raises:
            InvalidInputError: what is wrong with it (``parameter`` names it).
        """
        geometry = (
            data.get("geometry")
            if isinstance(data, dict) and data.get("type") == "Feature"
            else data
        )
        if not isinstance(geometry, dict) or geometry.get("type") not in _TYPES:
            raise InvalidInputError(
                "the coverage must be a GeoJSON Polygon or MultiPolygon (or a Feature of one)",
                parameter=parameter,
            )
        coords = geometry.get("coordinates")
        if not isinstance(coords, list) or not coords:
            raise InvalidInputError(f"{geometry['type']}: no coordinates", parameter=parameter)
        polygons = [coords] if geometry["type"] == "Polygon" else coords
        shapes, seen = [], 0
        for polygon in polygons:
            if not isinstance(polygon, list) or not polygon:
                raise InvalidInputError("a polygon must be a list of rings", parameter=parameter)
            rings = []
            for ring in polygon:
                seen += len(ring) if isinstance(ring, list) else 0
                if seen > MAX_VERTICES:
                    raise InvalidInputError(
                        f"the coverage has more than {MAX_VERTICES} vertices: simplify it, or"
                        " name a layer of ours (coverage_layer)",
                        parameter=parameter,
                    )
                rings.append(_ring(ring, parameter))
            shapes.append(shapely.Polygon(rings[0], rings[1:]))
        shape = shapes[0] if len(shapes) == 1 else shapely.MultiPolygon(shapes)
        if not shape.is_valid:
            reason = shapely.is_valid_reason(shape)
            raise InvalidInputError(
                f"the coverage is not a valid polygon: {reason}", parameter=parameter
            )
        if shape.area == 0:
            raise InvalidInputError("the coverage has no area", parameter=parameter)
        return cls.of_geometry(shape, buffer)

    # -- its JSON form (a job's parameters) ------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The coverage as JSON: ``bounds``, ``geometry`` (GeoJSON, or null for the box),
        ``buffer``, and ``layer`` when it is a layer's polygons."""
        geometry = None if self.geometry is None else json.loads(shapely.to_geojson(self.geometry))
        data = {"bounds": list(self.bounds), "geometry": geometry, "buffer": self.buffer}
        return data | ({"layer": self.layer} if self.layer else {})

    def outline(self, max_vertices: int = 1000) -> dict[str, Any]:
        """The area as a GeoJSON geometry of about ``max_vertices`` vertices at most, to draw
        (EPSG:4326; simplified, topology kept, with a tolerance doubled until it fits, 40 times
        at most; the buffer, in pixels of each zoom, aside)."""
        geometry = self.geometry if self.geometry is not None else shapely.box(*self.bounds)
        west, south, east, north = self.bounds
        tolerance = max(east - west, north - south) / 10_000
        for _ in range(40):  # (many small parts keep a few vertices each, however simplified)
            if shapely.get_num_coordinates(geometry) <= max_vertices:
                break
            geometry = shapely.simplify(geometry, tolerance, preserve_topology=True)
            tolerance *= 2
        found: dict[str, Any] = json.loads(shapely.to_geojson(geometry))
        return found

    @classmethod
    def from_json(cls, data: dict[str, Any] | Sequence[float]) -> Coverage:
        """A coverage from :meth:`to_json`; a list is a footprint box (steps sent before
        coverages existed)."""
        if not isinstance(data, dict):
            return cls.box(data)
        if data.get("geometry") is None:
            found = cls.box(data["bounds"], data.get("buffer", 0))
        else:
            shape = shapely.geometry.shape(data["geometry"])
            found = cls.of_geometry(shape, data.get("buffer", 0))
        return replace(found, layer=data.get("layer"))

    # -- the tiles that meet it ------------------------------------------------------------

    def _grow(self, q: int, zoom: int) -> float:
        """The buffer of zoom ``zoom``, in tiles of level ``q``."""
        return self.buffer / _TILE_PX / (1 << (zoom - q))

    def _meets(self, q: int, x: np.ndarray, y: np.ndarray, zoom: int) -> np.ndarray:
        """Which tiles of level ``q``, grown by the buffer of ``zoom``, share an area with it."""
        w, s, e, n = _boxes(q, x, y, self._grow(q, zoom))
        if self.geometry is None:
            west, south, east, north = self.bounds
            return (w < east) & (e > west) & (s < north) & (n > south)
        boxes = shapely.box(w, s, e, n)
        meets: np.ndarray = shapely.intersects(self.geometry, boxes)
        meets &= ~shapely.touches(self.geometry, boxes)
        return meets

    def meets(self, zoom: int, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Which tiles ``x``, ``y`` of ``zoom`` (arrays) meet it, grown by its buffer."""
        return self._meets(zoom, x, y, zoom)

    def _holds(self, q: int, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Which tiles of level ``q`` lie in it whole (so does every tile below them)."""
        w, s, e, n = _boxes(q, x, y, 0.0)
        if self.geometry is None:
            west, south, east, north = self.bounds
            return (w >= west) & (e <= east) & (s >= south) & (n <= north)
        held: np.ndarray = shapely.covers(self.geometry, shapely.box(w, s, e, n))
        return held

    def _walk(
        self, level: int, zoom: int, max_edge: int | None = None, deadline: float | None = None
    ) -> _Tree | None:
        """The tiles of levels 0..``level`` that meet it grown by the buffer of ``zoom``: per
        level, those held whole (their subtrees not walked) and those on its edge.

        With ``max_edge``, None as soon as a level's edge holds more tiles than that: the walk
        then never tests more than four times ``max_edge`` tiles at once, however large the
        level (a long edge at zoom 24 has millions); with ``deadline`` (``time.monotonic()``),
        None once it has passed (a polygon of many vertices costs more a tile).
        """
        x = y = np.zeros(1, dtype=np.int64)
        tree = _Tree(level)
        for q in range(level + 1):
            if q:
                x = (x[:, None] * 2 + np.array([0, 1, 0, 1])).ravel()
                y = (y[:, None] * 2 + np.array([0, 0, 1, 1])).ravel()
            meets = self._meets(q, x, y, zoom)
            x, y = x[meets], y[meets]
            held = self._holds(q, x, y)
            tree.add(q, x[held], y[held], x[~held], y[~held])
            x, y = x[~held], y[~held]
            if max_edge is not None and len(x) > max_edge:
                return None
            if deadline is not None and time.monotonic() > deadline:
                return None
        return tree

    def count(self, zoom: int, deadline: float | None = None) -> int | None:
        """The number of tiles of ``zoom`` that meet it; None when its edge alone is more than
        :data:`MAX_EDGE` tiles (so is the count), or when ``deadline`` passed: too many to count
        in a request."""
        tree = self._walk(zoom, zoom, MAX_EDGE, deadline)
        return None if tree is None else tree.total()

    def blocks(self, zoom: int, side: int, start: int = 0) -> Iterator[Block]:
        """The blocks of tiles of ``zoom`` that meet it, from the ``start``-th on: one per
        ``side`` x ``side`` square of the grid (aligned to multiples of ``side``) holding a tile
        that meets it, cut to the bounding box of those tiles."""
        level, tree = self._block_tree(zoom, side)
        span = 2 ** (zoom - level)
        for bx, by, whole in tree.nodes(start):
            x0, y0 = bx * span, by * span
            if whole:
                yield Block(x0, y0, x0 + span - 1, y0 + span - 1, None)
                continue
            dx, dy = np.meshgrid(np.arange(span), np.arange(span))
            hit = self._meets(zoom, x0 + dx.ravel(), y0 + dy.ravel(), zoom).reshape(span, span)
            # some tile does: the block's interior meets the coverage's, so a tile's does
            rows, cols = np.flatnonzero(hit.any(axis=1)), np.flatnonzero(hit.any(axis=0))
            part = hit[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
            mask = (
                None if part.all() else int(sum(1 << int(i) for i in np.flatnonzero(part.ravel())))
            )
            yield Block(
                x0 + int(cols[0]), y0 + int(rows[0]), x0 + int(cols[-1]), y0 + int(rows[-1]), mask
            )

    def count_blocks(self, zoom: int, side: int) -> int:
        """The number of :meth:`blocks` of ``zoom``."""
        return self._block_tree(zoom, side)[1].total()

    def _block_tree(self, zoom: int, side: int) -> tuple[int, _Tree]:
        level = max(0, zoom - int(math.log2(side)))
        tree = self._walk(level, zoom)
        assert tree is not None  # no limit: always walked whole
        return level, tree

    def tiles(self, zoom: int) -> Iterator[TileAddress]:
        """The tiles of ``zoom`` that meet it, block by block."""
        for block in self.blocks(zoom, 8):
            width = block.x1 - block.x0 + 1
            for y in range(block.y0, block.y1 + 1):
                for x in range(block.x0, block.x1 + 1):
                    bit = (y - block.y0) * width + (x - block.x0)
                    if block.mask is None or block.mask >> bit & 1:
                        yield TileAddress(zoom, x, y)


class _Tree:
    """The tiles of a walk down to ``level``: per level, those held whole and those on the
    edge; the number of tiles of ``level`` below each tile on the edge."""

    def __init__(self, level: int) -> None:
        self.level = level
        self.whole: list[set[tuple[int, int]]] = []
        self.edge: list[list[tuple[int, int]]] = []

    def add(self, q: int, wx: np.ndarray, wy: np.ndarray, ex: np.ndarray, ey: np.ndarray) -> None:
        self.whole.append(set(zip(wx.tolist(), wy.tolist(), strict=True)))
        self.edge.append(list(zip(ex.tolist(), ey.tolist(), strict=True)))

    def total(self) -> int:
        """The tiles of the last level."""
        held = sum(len(w) * 1 << 2 * (self.level - q) for q, w in enumerate(self.whole))
        return held + len(self.edge[self.level])

    def _counts(self) -> list[dict[tuple[int, int], int]]:
        """Per level, the tiles of the last level below each tile on the edge."""
        counts: list[dict[tuple[int, int], int]] = [{} for _ in range(self.level + 1)]
        counts[self.level] = dict.fromkeys(self.edge[self.level], 1)
        for q in range(self.level - 1, -1, -1):
            below = counts[q]
            for (x, y), n in counts[q + 1].items():
                below[x >> 1, y >> 1] = below.get((x >> 1, y >> 1), 0) + n
            for x, y in self.whole[q + 1]:
                below[x >> 1, y >> 1] = below.get((x >> 1, y >> 1), 0) + 1 << 2 * (
                    self.level - q - 1
                )
        return counts

    def nodes(self, start: int) -> Iterator[tuple[int, int, bool]]:
        """The tiles of the last level, each with whether it is held whole, in a fixed order
        (depth first; row by row under a tile held whole), from the ``start``-th on."""
        counts = self._counts()

        def below(q: int, x: int, y: int) -> int:
            if (x, y) in self.whole[q]:
                return 1 << 2 * (self.level - q)
            return counts[q].get((x, y), 0)

        def walk(q: int, x: int, y: int, skip: int) -> Iterator[tuple[int, int, bool]]:
            if (x, y) in self.whole[q]:
                span = 2 ** (self.level - q)
                for i in range(skip, span * span):
                    yield x * span + i % span, y * span + i // span, True
                return
            if q == self.level:
                yield x, y, False
                return
            for cx, cy in (
                (2 * x, 2 * y),
                (2 * x + 1, 2 * y),
                (2 * x, 2 * y + 1),
                (2 * x + 1, 2 * y + 1),
            ):
                n = below(q + 1, cx, cy)
                if skip >= n:
                    skip -= n
                    continue
                yield from walk(q + 1, cx, cy, skip)
                skip = 0

        if start < below(0, 0, 0):
            yield from walk(0, 0, 0, start)


def _buffer(pixels: int) -> int:
    if not 0 <= pixels <= MAX_BUFFER:
        raise InvalidInputError(f"buffer must be 0..{MAX_BUFFER} pixels", parameter="buffer")
    return pixels


def _finite(value: float) -> bool:
    """Whether ``value`` is a finite float (an integer of 400 digits is not one)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _ring(ring: Any, parameter: str) -> list[tuple[float, float]]:
    """A linear ring's positions, checked."""
    if not isinstance(ring, list) or len(ring) < 4:
        raise InvalidInputError(
            "a ring must be a list of at least 4 positions", parameter=parameter
        )
    points = []
    for position in ring:
        if (
            not isinstance(position, list)
            or not 2 <= len(position) <= 3
            or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in position)
            or not all(_finite(v) for v in position)
        ):
            raise InvalidInputError(
                "a position must be 2 or 3 finite numbers (longitude, latitude)",
                parameter=parameter,
            )
        lon, lat = position[0], position[1]
        if not (-180 <= lon <= 180 and -90 <= lat <= 90):
            raise InvalidInputError(
                f"position {lon},{lat} is outside longitudes -180..180 and latitudes -90..90",
                parameter=parameter,
            )
        points.append((float(lon), float(lat)))
    if points[0] != points[-1]:
        raise InvalidInputError("a ring must end where it starts", parameter=parameter)
    return points


async def layer_coverage(
    engine: AsyncEngine, layer: VectorLayer, where: str | None, buffer: int, timeout_ms: int
) -> Coverage:
    """The union of the rows of a polygon layer of ours that ``where`` (CQL2-text) matches.

    One statement, under the statement timeout, answers the union in EPSG:4326 as GeoJSON (or
    its vertex count, when it is above :data:`MAX_VERTICES`).

    Raises:
        InvalidInputError: the layer holds no polygons, or ``where`` is not a filter of it.
        UnprocessableError: no row matches (the coverage is empty), or the union has more
            than :data:`MAX_VERTICES` vertices.
        UnavailableError: the statement timeout passed, or the database failed.
    """
    if "POLYGON" not in layer.geometry_type.upper() and layer.geometry_type.upper() != "GEOMETRY":
        raise InvalidInputError(
            f"coverage_layer {layer.id} holds {layer.geometry_type} geometries, not polygons",
            parameter="coverage_layer",
        )
    try:
        query = LayerQuery(cql=parse_cql(where, layer) if where else None)
    except InvalidInputError as exc:
        raise refusing(exc, "where") from None
    condition, params = where_sql(layer, query)
    geom = f"t.{ident(layer.geometry_column)}"
    union = f"ST_CollectionExtract(ST_Union({geom}), 3)"
    if layer.srid != 4326:
        union = f"ST_Transform({union}, 4326)"
    sql = (
        "SELECT CASE WHEN u IS NULL OR ST_IsEmpty(u) THEN NULL"
        " WHEN ST_NPoints(u) > :max_vertices THEN ST_NPoints(u)::text"
        " ELSE ST_AsGeoJSON(u) END"
        f" FROM (SELECT {union} AS u FROM {layer.relation} t WHERE {condition}) s"
    )
    try:
        answer = await read_pool(engine).value(
            pyformat(sql), {**params, "max_vertices": MAX_VERTICES}
        )
    except psycopg.Error as exc:
        raise refusing(db_error(exc, timeout_ms, filtered=where is not None), "where") from exc
    if answer is None:
        raise UnprocessableError(
            f"the coverage is empty: no row of {layer.id} matches where", parameter="where"
        )
    if not answer.startswith("{"):
        raise UnprocessableError(
            f"the coverage has {answer} vertices, more than {MAX_VERTICES}: narrow where",
            parameter="where",
        )
    shape = shapely.from_geojson(answer)
    found = Coverage.of_geometry(shape if shape.is_valid else shapely.make_valid(shape), buffer)
    return replace(found, layer=layer.id)
