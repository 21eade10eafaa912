"""Rendering with Mapnik: a renderer per process, keeping each loaded map.

Mapnik holds the GIL while it renders, so the API renders in a pool of processes (see
:mod:`shared.tiles.pool`), each with one :class:`TileRenderer`; a worker process has its own too.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.errors import InvalidInputError, UnprocessableError
from shared.mapnik_env import mapnik
from shared.metrics import RENDER_SECONDS
from shared.tiles.encoding import JPEG_BACKGROUND, PNG_CODEC, PNG_FORMAT, Codec
from shared.tiles.grid import RenderArea, TileAddress
from shared.tiles.png import Rendered
from shared.tiles.styles import LANG_TOKEN, style_path

# PNG_FORMAT stays importable from here: the tile benchmark encodes as the renderer does
__all__ = ["PNG_FORMAT", "TileRenderer"]


@dataclass
class _Loaded:
    mtime_ns: int
    map: Any
    sources: list[Path]


class TileRenderer:
    """Renders the styles of a folder of Mapnik XML files; reloads a style when its file changes."""

    def __init__(self, mapnik_dir: Path, tile_size: int = 256) -> None:
        self.mapnik_dir = mapnik_dir
        self.tile_size = tile_size
        self._maps: dict[tuple[str, str], _Loaded] = {}

    def __enter__(self) -> TileRenderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._maps.clear()

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
            loaded = _Loaded(mtime, m, sources)
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

    def render(self, style: str, lang: str, area: RenderArea, codec: Codec = PNG_CODEC) -> Rendered:
        """Render ``area`` of the map of ``style`` with labels in ``lang``, encoded by ``codec``.

        Raises:
            NotFoundError: no such style.
            UnprocessableError: the style or its raster cannot be read.
            InvalidInputError: ``srs`` is not a CRS PROJ knows.
        """
        started = time.perf_counter()
        m = self._load(style, lang).map
        srs, width, height = area.srs, area.width, area.height
        if srs is not None:
            try:
                mapnik.Projection(srs)
            except RuntimeError as exc:
                raise InvalidInputError(f"unknown srs {srs!r}", srs=srs) from exc
        own_srs = m.srs
        m.resize(width, height)
        # a box in another CRS is drawn in that CRS: the map's projection is its, this once
        m.srs = srs or own_srs
        try:
            m.zoom_to_box(mapnik.Box2d(*area.bbox))
            image = mapnik.Image(width, height)
            mapnik.render(m, image, float(area.scale))
        except RuntimeError as exc:
            raise UnprocessableError(
                f"rendering {style!r} failed: {exc}".splitlines()[0], style=style
            ) from exc
        finally:
            m.srs = own_srs
        empty = not image.painted() or _blank(image)
        rendered = Rendered(_encode(image, codec), empty)
        RENDER_SECONDS.labels(style).observe(time.perf_counter() - started)
        return rendered

    def render_tile(
        self, style: str, lang: str, tile: TileAddress, codec: Codec = PNG_CODEC, scale: int = 1
    ) -> Rendered:
        """Render one tile of the Web Mercator grid (``scale`` 2: ``@2x``, twice the pixels)."""
        return self.render(style, lang, tile.area(self.tile_size, scale), codec)


def _blank(image: Any) -> bool:
    return bool(image.is_solid()) and image.get_pixel(0, 0) == 0


def _encode(image: Any, codec: Codec) -> bytes:
    """The image's bytes; a format without alpha gets ``JPEG_BACKGROUND`` behind the map."""
    if not codec.format.has_alpha:
        background = mapnik.Image(image.width(), image.height())
        background.fill(mapnik.Color(*JPEG_BACKGROUND))
        background.composite(image)
        image = background
    data: bytes = image.to_string(codec.options)
    return data
