"""Serving tiles: the cache first, the render pool on a miss, one render per tile at a time."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from pathlib import Path

from rasterio.warp import transform_bounds

from shared.singleflight import SingleFlight
from shared.tiles.grid import TileAddress
from shared.tiles.png import Rendered, transparent_png
from shared.tiles.pool import RenderPool
from shared.tiles.store import TileStore, tile_key
from shared.tiles.styles import StyleInfo, read_style

__all__ = ["TileResult", "TileService", "etag_of"]


@dataclass(frozen=True)
class TileResult:
    """A tile and how it was obtained."""

    png: bytes
    cache: str  # "HIT" or "MISS"
    empty: bool


def etag_of(png: bytes) -> str:
    """A strong ETag of a tile's bytes."""
    return '"' + hashlib.blake2b(png, digest_size=16).hexdigest() + '"'


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
        self, style: str, lang: str, tile: TileAddress, store: TileStore, *, refresh: bool
    ) -> TileResult:
        """A tile from ``store``, or rendered (and stored unless ``refresh``).

        Args:
            style: the style (layer id).
            lang: the label language.
            tile: the tile.
            store: the tile cache to read and fill.
            refresh: render afresh and store nothing (``nocache=1``).

        Raises:
            NotFoundError: no such style.
            UnprocessableError: the style or its raster cannot be read.
        """
        info = self.style(style)
        if info.bounds is not None and not tile.intersects(info.bounds):
            return TileResult(transparent_png(self.tile_size, self.tile_size), "MISS", True)
        key = tile_key(style, lang, tile)
        if not refresh:
            cached = await asyncio.to_thread(store.get, key)
            if cached is not None:
                return TileResult(cached, "HIT", False)

        async def render() -> Rendered:
            return await self.pool.render(style, lang, tile.area(self.tile_size))

        async def render_and_store() -> Rendered:
            rendered = await render()
            self.renders += 1
            await asyncio.to_thread(store.put, key, rendered.png)
            return rendered

        if refresh:
            rendered = await render()
        else:
            # keyed by store too: a waiter's tile must land in its own store
            rendered = await self._inflight.run((store, key), render_and_store)
        return TileResult(rendered.png, "MISS", rendered.empty)

    def bbound(self, style: str, tile: TileAddress) -> list[float]:
        """The tile's corners in the CRS of the style's layer (spec 2.6 ``bbound``)."""
        info = self.style(style)
        bounds = tile.bounds_3857()
        if info.layer_srs is None:
            return list(bounds)
        return list(transform_bounds("EPSG:3857", info.layer_srs, *bounds, densify_pts=21))
