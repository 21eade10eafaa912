"""Serving tiles: the cache first, the render pool on a miss, one render per tile at a time."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from rasterio.warp import transform_bounds

from shared.base.encoding import DEFAULT_ENCODING, Encoding, empty_tile
from shared.base.formats import PNG_TILE, TileVariant
from shared.base.grid import TileAddress
from shared.base.png import Rendered
from shared.metrics import count_tile_lookup
from shared.raster.rendering import Rendering
from shared.singleflight import SingleFlight
from shared.tiles.pool import RenderPool
from shared.tiles.store import StoredTile, TileStore, etag_of, tile_key
from shared.tiles.styles import StyleInfo, read_style

__all__ = ["TileResult", "TileService"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TileResult:
    """A tile (its encoded bytes), its ETag, and how it was obtained."""

    data: bytes
    etag: str  # the stored file's (as nginx gives it) or, for a tile not stored, its bytes'
    cache: str  # "HIT" or "MISS"
    empty: bool


class TileService:
    """Tiles of the styles in ``mapnik_dir``, cached in a store.

    Each look-up in the cache is counted (``mapsvc_tile_cache_requests_total``), by layer and
    result, and by zoom too with ``count_zoom``.
    """

    def __init__(
        self, mapnik_dir: Path, pool: RenderPool, tile_size: int = 256, *, count_zoom: bool = False
    ) -> None:
        self.mapnik_dir = mapnik_dir
        self.pool = pool
        self.tile_size = tile_size
        self.count_zoom = count_zoom
        # concurrent requests for one uncached tile share one render (and one write)
        self._inflight: SingleFlight[tuple[Rendered, str]] = SingleFlight()
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
        rendering: Rendering | None = None,
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
            rendering: a raster layer drawn with these parameters (over its own): its tiles are
                cached apart, under the key of the canonical parameters.

        Raises:
            NotFoundError: no such style.
            UnprocessableError: the style or its raster cannot be read.
        """
        info = self.style(style)
        if info.bounds is not None and not tile.intersects(info.bounds):
            empty = empty_tile(variant.format, self.tile_size * variant.scale)
            return TileResult(empty, etag_of(empty), "MISS", True)
        drawn = rendering if rendering is not None and not rendering.empty else None
        key = tile_key(style, lang, tile, variant, drawn)
        if not refresh:
            cached: StoredTile | None = await asyncio.to_thread(store.read, key)
            count_tile_lookup(style, cached is not None, tile.z if self.count_zoom else None)
            if cached is not None:
                return TileResult(cached.data, cached.etag, "HIT", False)

        async def render() -> Rendered:
            area = tile.area(self.tile_size, variant.scale)
            codec = encoding.codec(variant.format)
            return await self.pool.render(style, lang, area, codec, drawn)

        async def render_and_store() -> tuple[Rendered, str]:
            rendered = await render()
            self.renders += 1
            try:
                return rendered, await asyncio.to_thread(store.put, key, rendered.data)
            except OSError as exc:  # a full or failing disk: the tile is served, not cached
                log.error("tile cache write of %s failed, served uncached: %s", key, exc)
                return rendered, etag_of(rendered.data)

        if refresh:
            rendered = await render()
            etag = etag_of(rendered.data)
        else:
            # keyed by store too: a waiter's tile must land in its own store
            rendered, etag = await self._inflight.run((store, key), render_and_store)
        return TileResult(rendered.data, etag, "MISS", rendered.empty)

    def bbound(self, style: str, tile: TileAddress) -> list[float]:
        """The tile's corners in the CRS of the style's layer (spec 2.6 ``bbound``)."""
        info = self.style(style)
        bounds = tile.bounds_3857()
        if info.layer_srs is None:
            return list(bounds)
        return list(transform_bounds("EPSG:3857", info.layer_srs, *bounds, densify_pts=21))
