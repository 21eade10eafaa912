"""Rendering tiles: a renderer per process, keeping each loaded map.

Mapnik draws maps of vectors; a raster layer's map is drawn by numpy
(:mod:`shared.raster.draw`), sampled where GDAL's warp samples it. Both hold the GIL for most of
a render, so the API renders in a pool of processes (see :mod:`shared.tiles.pool`), each with one
:class:`TileRenderer`; a worker process has its own too.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from shared.base.encoder import Background, Cutter, SolidTiles
from shared.base.encoding import PNG_CODEC, Codec
from shared.base.grid import RenderArea, TileAddress
from shared.base.png import Rendered
from shared.errors import InvalidInputError, UnprocessableError
from shared.mapnik_env import mapnik
from shared.metrics import RENDER_SECONDS
from shared.raster.draw import LayerDrawing, RasterDrawer
from shared.raster.rendering import Rendering, rendering_from_json
from shared.raster.resampling import from_mapnik
from shared.tiles.metatile import Metatile
from shared.tiles.styles import LANG_TOKEN, style_path

__all__ = ["TileRenderer"]

#: the parameter of a style's ``<Parameters>`` that sets the side of its metatiles
_METATILE_PARAMETER = "metatile"
#: the layers of a raster layer's map (:func:`shared.raster.style.style_xml`)
_RASTER_LAYERS = frozenset({"preview", "overviews", "raster"})


@dataclass
class _Loaded:
    mtime_ns: int
    map: Any
    sources: list[Path]
    #: whether a symbolizer may draw past its feature's tile (all but a raster's: labels, icons,
    #: strokes): only then does a metatile need its buffer
    overhangs: bool
    #: a raster layer's drawing (None for a style of vectors)
    raster: LayerDrawing | None


class TileRenderer:
    """Renders the styles of a folder of Mapnik XML files; reloads a style when its file changes."""

    def __init__(self, mapnik_dir: Path, tile_size: int = 256) -> None:
        self.mapnik_dir = mapnik_dir
        self.tile_size = tile_size
        self._maps: dict[tuple[str, str], _Loaded] = {}
        self.rasters = RasterDrawer()
        #: the one-colour tiles encoded so far, whose bytes are reused
        self.solid = SolidTiles()

    def __enter__(self) -> TileRenderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._maps.clear()
        self.solid.clear()
        self.rasters.close()

    def _load(self, style: str, lang: str) -> _Loaded:
        path = style_path(self.mapnik_dir, style)
        mtime = os.stat(path).st_mtime_ns
        loaded = self._maps.get((style, lang))
        if loaded is None or loaded.mtime_ns != mtime:
            xml = path.read_text().replace(LANG_TOKEN, lang)
            m = mapnik.Map(self.tile_size, self.tile_size)
            try:
                mapnik.load_map_from_string(m, xml, False, str(path.parent) + os.sep)
            except RuntimeError as exc:
                raise UnprocessableError(
                    f"the map configuration {style!r} cannot be loaded: {exc}".splitlines()[0],
                    style=style,
                ) from exc
            sources = [
                (path.parent / str(layer.datasource.parameters()["file"])).resolve()
                for layer in m.layers
                if "file" in layer.datasource.parameters()
            ]
            try:
                tree: ET.Element | None = ET.fromstring(xml)
            except ET.ParseError:
                tree = None  # Mapnik read it: the buffer, to be safe
            loaded = _Loaded(mtime, m, sources, _overhangs(tree), _raster(m, path.parent, tree))
            self._maps[(style, lang)] = loaded
        # a source deleted after loading would still be read through its open handle
        for source in loaded.sources:
            if not source.exists():
                self._maps.pop((style, lang), None)
                raise UnprocessableError(
                    f"the raster of style {style!r} is gone ({source.name}); configure it again",
                    style=style,
                )
        return loaded

    def _cutter(
        self,
        style: str,
        lang: str,
        area: RenderArea,
        codec: Codec,
        rendering: Rendering | None = None,
        buffer: int = 0,
        background: Background | None = None,
    ) -> Cutter:
        """The tiles of ``area`` drawn: a raster layer's by numpy (:mod:`shared.raster.draw`:
        where GDAL's warp samples the source, the same for every tile), a map of vectors by
        Mapnik.

        Raises:
            NotFoundError: no such style.
            UnprocessableError: the style or its raster cannot be read.
            InvalidInputError: ``srs`` is not a CRS PROJ knows, or ``rendering`` does not fit
                the layer (a band it does not have; a style of vectors).
        """
        srs = area.srs
        if srs is not None:
            try:
                mapnik.Projection(srs)
            except RuntimeError as exc:
                raise InvalidInputError(f"unknown srs {srs!r}", srs=srs) from exc
        raster = self._load(style, lang).raster
        asked = rendering is not None and not rendering.empty
        if asked and raster is None:
            raise InvalidInputError(
                "rendering parameters are for raster layers; this style draws vectors",
                parameter=next(iter(rendering.params())) if rendering else None,
                style=style,
            )
        if raster is not None:
            chosen = rendering or Rendering()
            count = self.rasters.band_count(raster)
            if chosen.bands_read and max(chosen.bands_read) > count:
                name = "expression" if chosen.expression else "bidx"
                raise InvalidInputError(
                    f"{name}: band {max(chosen.bands_read)} does not exist (bands are 1..{count})",
                    parameter=name,
                )
            pixels = self.rasters.draw(raster, area, chosen)
            return Cutter.of_pixels(pixels, codec, self.solid, background)
        image = self._draw(style, lang, area, buffer)
        if background is not None:
            return Cutter.over(image, codec, self.solid, background)
        return Cutter(image, codec, self.solid)

    def _draw(self, style: str, lang: str, area: RenderArea, buffer: int = 0) -> Any:
        """The Mapnik image of ``area`` (what lies up to ``buffer`` pixels past it drawn too).

        Raises:
            NotFoundError: no such style.
            UnprocessableError: the style or its raster cannot be read.
        """
        m = self._load(style, lang).map
        srs, width, height = area.srs, area.width, area.height
        own_srs, own_buffer = m.srs, m.buffer_size
        m.resize(width, height)
        # a box in another CRS is drawn in that CRS: the map's projection is its, this once
        m.srs = srs or own_srs
        m.buffer_size = max(own_buffer, buffer)
        try:
            m.zoom_to_box(mapnik.Box2d(*area.bbox))
            image = mapnik.Image(width, height)
            mapnik.render(m, image, float(area.scale))
        except RuntimeError as exc:
            raise UnprocessableError(
                f"rendering {style!r} failed: {exc}".splitlines()[0], style=style
            ) from exc
        finally:
            m.srs, m.buffer_size = own_srs, own_buffer
        return image

    def render(
        self,
        style: str,
        lang: str,
        area: RenderArea,
        codec: Codec = PNG_CODEC,
        rendering: Rendering | None = None,
        background: Background | None = None,
    ) -> Rendered:
        """Render ``area`` of the map of ``style`` with labels in ``lang``, encoded by ``codec``;
        a raster layer with ``rendering`` (its choices over the layer's own); over the colour
        ``background`` when given (a WMS map that is not transparent).

        Raises:
            NotFoundError: no such style.
            UnprocessableError: the style or its raster cannot be read.
            InvalidInputError: ``srs`` is not a CRS PROJ knows, or ``rendering`` does not fit
                the layer.
        """
        started = time.perf_counter()
        cutter = self._cutter(style, lang, area, codec, rendering, background=background)
        rendered = cutter.tile(0, 0, area.width, area.height)
        RENDER_SECONDS.labels(style).observe(time.perf_counter() - started)
        return rendered

    def render_tile(
        self,
        style: str,
        lang: str,
        tile: TileAddress,
        codec: Codec = PNG_CODEC,
        scale: int = 1,
        rendering: Rendering | None = None,
    ) -> Rendered:
        """Render one tile of the Web Mercator grid (``scale`` 2: ``@2x``, twice the pixels)."""
        return self.render(style, lang, tile.area(self.tile_size, scale), codec, rendering)

    def metatile_size(self, style: str, lang: str, default: int) -> int:
        """The side of the metatiles of ``style``: its ``metatile`` parameter, else ``default``
        for a style that draws vectors, and 1 (tile by tile) for a style of rasters alone.

        A raster gains nothing from metatiles: its pixels end at the tile's border, and the cost
        of a raster tile is its reading and encoding, not a render's set-up.

        Raises:
            NotFoundError: no such style.
            UnprocessableError: the style cannot be loaded, or its ``metatile`` is not a count.
        """
        loaded = self._load(style, lang)
        value = dict(loaded.map.parameters).get(
            _METATILE_PARAMETER, default if loaded.overhangs else 1
        )
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UnprocessableError(
                f"the {_METATILE_PARAMETER!r} parameter of style {style!r} must be a whole"
                f" number of tiles, 1 or more, not {value!r}",
                style=style,
            )
        return value

    def render_metatile(
        self,
        style: str,
        lang: str,
        block: Metatile,
        tiles: Sequence[TileAddress],
        codec: Codec = PNG_CODEC,
        scale: int = 1,
        buffer: int = 0,
    ) -> Iterator[tuple[TileAddress, Rendered]]:
        """Draw ``block`` as one image with ``buffer`` pixels around (none for a style of rasters
        alone), then cut and encode each of ``tiles`` (of the block), one at a time (a view of
        the image each, a tile of one colour encoded once: see :mod:`shared.base.encoder`).

        A tile cut so is the tile :meth:`render_tile` draws, pixel for pixel, but where a label
        or symbol crosses a tile's border (drawn whole here).

        Raises:
            NotFoundError: no such style.
            UnprocessableError: the style or its raster cannot be read.
        """
        started = time.perf_counter()
        if not self._load(style, lang).overhangs:
            buffer = 0  # a raster's pixels end at the tile's border: the buffer draws nothing
        area, cut = block.area(self.tile_size, scale, buffer)
        try:
            cutter = self._cutter(style, lang, area, codec, buffer=buffer * scale)
            for tile in tiles:
                x, y = block.offset(tile, cut)
                yield tile, cutter.tile(x, y, cut.side, cut.side)
        finally:
            RENDER_SECONDS.labels(style).observe(time.perf_counter() - started)


def _raster(m: Any, xml_dir: Path, tree: ET.Element | None) -> LayerDrawing | None:
    """The drawing of a raster layer's map (its configuration's ``rendering`` and
    ``statistics``, its source read through overviews, the resampling its ``RasterSymbolizer``
    names); None for any other map (vectors, or more than a raster layer's own layers)."""
    if any(str(layer.name) not in _RASTER_LAYERS for layer in m.layers):
        return None
    files = {
        str(layer.name): (xml_dir / str(layer.datasource.parameters()["file"])).resolve()
        for layer in m.layers
        if layer.datasource.parameters().get("type") == "gdal"
    }
    source = files.get("overviews") or files.get("raster")
    if source is None:
        return None
    params = dict(m.parameters)
    saved = params.get("rendering")
    rendering = rendering_from_json(json.loads(saved)) if saved else None
    statistics = json.loads(params["statistics"]) if params.get("statistics") else []
    symbolizer = tree.find(".//RasterSymbolizer") if tree is not None else None
    scaling = symbolizer.get("scaling") if symbolizer is not None else None
    return LayerDrawing(source, rendering, statistics, from_mapnik(scaling))


def _overhangs(tree: ET.Element | None) -> bool:
    """Whether the map ``tree`` has a symbolizer other than ``RasterSymbolizer`` (a map
    Mapnik read that is not XML to us: yes, to be safe)."""
    if tree is None:
        return True
    return any(e.tag.endswith("Symbolizer") and e.tag != "RasterSymbolizer" for e in tree.iter())
