"""The cached tiles of a layer that lie in a set of tiles, found by walking the cache.

Truncation and expiry never list the tiles of their set (a coverage at zoom 20 has billions):
they walk what the cache holds. At a zoom, a walk lists only the columns the set's tiles lie in
(:meth:`TileSet.columns`): each column's folder ``<style>/<lang>/<z>/<x>`` when they are at
most :data:`COLUMN_LISTINGS`, else the zoom's folder, keeping its columns in range; in object
storage, past that many columns, one flat listing of the zoom (1000 keys a request). The tiles
found are tested against the set a batch at a time. The work is the cached tiles in the set's
columns, whatever the set's size.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from shared.base.formats import TileVariant, parse_variant
from shared.base.grid import TileAddress
from shared.errors import InvalidInputError
from shared.seeding.tile_sets import TileSet
from shared.settings import LANG_PATTERN
from shared.tiles.s3 import S3TileStore
from shared.tiles.store import TileStore

__all__ = ["COLUMN_LISTINGS", "CachedTile", "cached_langs", "cached_tiles"]

#: most columns of a zoom listed one by one; past it, the zoom's folder is listed
COLUMN_LISTINGS = 256
_MAX_DIGITS = 8
_LANG = re.compile(LANG_PATTERN)


@dataclass(frozen=True)
class CachedTile:
    """A tile in the cache: its key, language, address and variant."""

    key: str
    lang: str
    tile: TileAddress
    variant: TileVariant


def cached_langs(store: TileStore, style: str) -> list[str]:
    """The languages the cache holds tiles of ``style`` in (its folders named as tags)."""
    return sorted(name for name in store.names(style) if _LANG.match(name))


def _number(text: str) -> int | None:
    if text.isascii() and text.isdigit() and len(text) <= _MAX_DIGITS:
        return int(text)
    return None


def _parse(name: str) -> tuple[int, TileVariant] | None:
    """The row and variant of a tile's file name, ``<y>[@2x].<ext>``; None for another name
    (a temporary file)."""
    stem, dot, extension = name.rpartition(".")
    if not dot:
        return None
    try:
        row, variant = parse_variant(stem, extension)
    except InvalidInputError:
        return None
    y = _number(row)
    return None if y is None else (y, variant)


def _in(ranges: list[tuple[int, int]], starts: list[int], x: int) -> bool:
    i = bisect.bisect_right(starts, x) - 1
    return i >= 0 and x <= ranges[i][1]


def _listed(
    store: TileStore, folder: str, ranges: list[tuple[int, int]]
) -> Iterator[list[tuple[int, str]]]:
    """The names in the columns ``ranges`` of the zoom folder ``folder``, with their column:
    a batch per column, or per page of a flat listing."""
    starts = [a for a, _ in ranges]
    columns = sum(b - a + 1 for a, b in ranges)
    if columns > COLUMN_LISTINGS and isinstance(store, S3TileStore):
        for page in store.key_pages(folder):
            batch = []
            for key in page:
                parts = key[len(folder) + 1 :].split("/")
                x = _number(parts[0]) if len(parts) == 2 else None
                if x is not None and _in(ranges, starts, x):
                    batch.append((x, parts[1]))
            yield batch
        return
    if columns > COLUMN_LISTINGS:
        found = (_number(name) for name in store.names(folder))
        xs = sorted(x for x in found if x is not None and _in(ranges, starts, x))
    else:
        xs = [x for a, b in ranges for x in range(a, b + 1)]
    for x in xs:
        names = store.names(f"{folder}/{x}")
        if names:
            yield [(x, name) for name in names]


def cached_tiles(
    store: TileStore,
    style: str,
    lang: str,
    zoom: int,
    tiles: TileSet,
    variants: frozenset[TileVariant] | None = None,
) -> Iterator[list[CachedTile]]:
    """The cached tiles of ``style`` in ``lang`` at ``zoom`` that are in ``tiles``, a batch
    (a column, or a page of a listing) at a time.

    Args:
        store: the cache.
        style: the layer.
        lang: the language.
        zoom: the zoom.
        tiles: the set.
        variants: the variants wanted (None: every one).
    """
    ranges = tiles.columns(zoom)
    if not ranges:
        return
    folder, side = f"{style}/{lang}/{zoom}", 1 << zoom
    for batch in _listed(store, folder, ranges):
        xs, ys, found = [], [], []
        for x, name in batch:
            parsed = _parse(name)
            if parsed is None or parsed[0] >= side or x >= side:
                continue
            y, variant = parsed
            if variants is not None and variant not in variants:
                continue
            xs.append(x)
            ys.append(y)
            found.append(CachedTile(f"{folder}/{x}/{name}", lang, TileAddress(zoom, x, y), variant))
        if found:
            meets = tiles.meets(zoom, np.array(xs), np.array(ys))
            yield [tile for tile, hit in zip(found, meets.tolist(), strict=True) if hit]
