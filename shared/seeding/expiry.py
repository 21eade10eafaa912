"""Expiry lists (issue 25): the tiles a data change made stale, as a request's body names them.

osm2pgsql writes an expire file (``-e``/``--expire-tiles``): a tile ``z/x/y`` a line. The body
of an expiry is such a list (``text/plain``), the same tiles as a JSON array of ``"z/x/y"``
strings, or a GeoJSON (Multi)Polygon (or a Feature of one): the tiles meeting it. Every line is
checked (``400`` naming the first bad line), and the list is bounded: at most
:data:`MAX_BYTES` and :data:`MAX_LINES` (``413`` past either). A listed tile stands for itself,
its parents and its children (:class:`~shared.seeding.tile_sets.ListedTiles`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from shared.base.grid import MAX_ZOOM, TileAddress
from shared.errors import InvalidInputError, PayloadTooLargeError
from shared.seeding.coverage import Coverage
from shared.seeding.tile_sets import CoverageTiles, ListedTiles, TileSet

__all__ = ["MAX_BYTES", "MAX_LINES", "expiry_tiles", "parse_tile_lines"]

#: most bytes of an expiry's body
MAX_BYTES = 2 * 1024 * 1024
#: most tiles an expiry lists (its lines, or its array's items)
MAX_LINES = 100_000
_LINE = re.compile(r"([0-9]{1,2})/([0-9]{1,8})/([0-9]{1,8})", re.ASCII)
_JSON = ("application/json", "application/geo+json")


def _tile(text: str, where: str, number: int) -> TileAddress:
    found = _LINE.fullmatch(text)
    if found is None:
        raise InvalidInputError(
            f"{where} {number}: {text[:40]!r} is not a tile z/x/y", parameter="body", line=number
        )
    z, x, y = (int(part) for part in found.groups())
    if z > MAX_ZOOM or x >= 1 << z or y >= 1 << z:
        raise InvalidInputError(
            f"{where} {number}: {text} is not a tile of the grid (zoom 0..{MAX_ZOOM}, column and"
            " row 0..2^zoom-1)",
            parameter="body",
            line=number,
        )
    return TileAddress(z, x, y)


def _many(count: int) -> None:
    if count > MAX_LINES:
        raise PayloadTooLargeError(
            f"an expiry lists at most {MAX_LINES} tiles; split it", limit_lines=MAX_LINES
        )


def parse_tile_lines(text: str) -> ListedTiles:
    """The tiles of an expire file, a ``z/x/y`` a line (blank lines and spaces around a tile
    are left out).

    Raises:
        InvalidInputError: a line that is not a tile of the grid (``detail.line`` is its
            number, from 1), or no tile at all.
        PayloadTooLargeError: more than :data:`MAX_LINES` lines.
    """
    lines = text.splitlines()
    _many(len(lines))
    tiles = [_tile(line.strip(), "line", n) for n, line in enumerate(lines, 1) if line.strip()]
    return _listed(tiles)


def _listed(tiles: list[TileAddress]) -> ListedTiles:
    if not tiles:
        raise InvalidInputError("the expiry names no tile", parameter="body")
    return ListedTiles(tiles)


def _json_tiles(items: list[Any]) -> ListedTiles:
    _many(len(items))
    tiles = []
    for n, item in enumerate(items, 1):
        if not isinstance(item, str):
            raise InvalidInputError(f"item {n}: a tile is a string z/x/y", parameter="body", line=n)
        tiles.append(_tile(item.strip(), "item", n))
    return _listed(tiles)


def expiry_tiles(body: bytes, media_type: str, buffer: int = 0) -> TileSet:
    """The tiles an expiry's body names.

    Args:
        body: the body (at most :data:`MAX_BYTES`, checked by the caller as it reads it).
        media_type: ``text/plain`` (an expire file), or ``application/json`` (an array of
            ``"z/x/y"``, or a GeoJSON polygon).
        buffer: pixels that grow each tile meeting a polygon.

    Raises:
        InvalidInputError: another media type, text that is not UTF-8, JSON that is not one of
            those, a bad tile or polygon.
        PayloadTooLargeError: more than :data:`MAX_LINES` tiles.
    """
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise InvalidInputError("the body is not UTF-8 text", parameter="body") from None
    if media_type == "text/plain":
        return parse_tile_lines(text)
    if media_type not in _JSON:
        raise InvalidInputError(
            "the body is a tile list (text/plain) or JSON (application/json)",
            parameter="Content-Type",
        )
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # (nested past Python's depth)
        raise InvalidInputError("the body is not JSON", parameter="body") from None
    if isinstance(data, list):
        return _json_tiles(data)
    return CoverageTiles(Coverage.of_geojson(data, buffer))
