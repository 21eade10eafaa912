"""Serving tiles: the cache first, the render pool on a miss, one render per tile at a time."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from pathlib import Path

from rasterio.warp import transform_bounds

from shared.singleflight import SingleFlight
from shared.tiles.encoding import DEFAULT_ENCODING, Encoding, empty_tile
from shared.tiles.formats import PNG_TILE, TileVariant
from shared.tiles.grid import TileAddress
from shared.tiles.png import Rendered
from shared.tiles.pool import RenderPool
from shared.tiles.store import TileStore, tile_key
from shared.tiles.styles import StyleInfo, read_style

__all__ = ["TileResult", "TileService", "etag_of"]


@dataclass(frozen=True)
class TileResult:
    """A tile (its encoded bytes) and how it was obtained."""

    data: bytes
    cache: str  # "HIT" or "MISS"
    empty: bool


def etag_of(data: bytes) -> str:
    """A strong ETag of a tile's bytes (each format and scale has its own bytes, so its own)."""
    return '"' + hashlib.blake2b(data, digest_size=16).hexdigest() + '"'


class TileService:
    """Tiles of the styles in ``mapnik_dir``, cached in a store."""

    def __init__(self, mapnik_dir: Path, pool: RenderPool, tile_size: int = 256) -> None:
        self.mapnik_dir = mapnik_dir
        self.pool = pool
        self.tile_size = tile_size
        # concurrent requests for one uncached tile share one render (and one write)
        self._inflight: SingleFlight[Rendered] = SingleFlight()
        #: tiles rendered for the cache by this process (a concurrent miss renders once)
        self.renders = 0

    def style(self, style: str) -> StyleInfo:
        """The style's bounds and CRS (raises NotFoundError for an unknown style)."""
        return read_style(self.mapnik_dir, style)

    async def tile(
        self,
        style: str,
        lang: str,
        tile: TileAddress,
        store: TileStore,
        *,
        refresh: bool,
        variant: TileVariant = PNG_TILE,
        encoding: Encoding = DEFAULT_ENCODING,
    ) -> TileResult:
        """A tile from ``store``, or rendered (and stored unless ``refresh``).

        Args:
            style: the style (layer id).
            lang: the label language.
            tile: the tile.
            store: the tile cache to read and fill.
            refresh: render afresh and store nothing (``nocache=1``).
            variant: the tile's format and scale; each is cached under its own key.
            encoding: how the format is encoded (a cached tile keeps the encoding it had).

        Raises:
            NotFoundError: no such style.
            UnprocessableError: the style or its raster cannot be read.
        """
        info = self.style(style)
        if info.bounds is not None and not tile.intersects(info.bounds):
            empty = empty_tile(variant.format, self.tile_size * variant.scale)
            return TileResult(empty, "MISS", True)
        key = tile_key(style, lang, tile, variant)
        if not refresh:
            cached = await asyncio.to_thread(store.get, key)
            if cached is not None:
                return TileResult(cached, "HIT", False)

        async def render() -> Rendered:
            area = tile.area(self.tile_size, variant.scale)
            return await self.pool.render(style, lang, area, encoding.codec(variant.format))

        async def render_and_store() -> Rendered:
            rendered = await render()
            self.renders += 1
            await asyncio.to_thread(store.put, key, rendered.data)
            return rendered

        if refresh:
            rendered = await render()
        else:
            # keyed by store too: a waiter's tile must land in its own store
            rendered = await self._inflight.run((store, key), render_and_store)
        return TileResult(rendered.data, "MISS", rendered.empty)

    def bbound(self, style: str, tile: TileAddress) -> list[float]:
        """The tile's corners in the CRS of the style's layer (spec 2.6 ``bbound``)."""
        info = self.style(style)
        bounds = tile.bounds_3857()
        if info.layer_srs is None:
            return list(bounds)
        return list(transform_bounds("EPSG:3857", info.layer_srs, *bounds, densify_pts=21))
