"""How tiles are encoded: Mapnik's format string of each format, and the empty tile of each.

Measured over the 977 tiles of zooms 8-12 of the Landsat scene (mean bytes of a 256 px tile, and
render plus encode time): ``PNG_FORMAT`` 45 kB in 6.9 ms; lossless WebP at libwebp's effort 1
25 kB (0.54 of the PNG: 0.67 at zoom 8, 0.53 at zoom 12) in 10 ms, where libwebp's default
effort saves 2-8% more at five times the encode time; lossy WebP at quality 80 2.2 kB (0.05) in
4.8 ms; JPEG at quality 85 4.7 kB (0.10) in 2.4 ms.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from rasterio.errors import NotGeoreferencedWarning
from rasterio.io import MemoryFile

from shared.base.formats import TileFormat
from shared.base.png import transparent_png
from shared.settings import TileSettings

__all__ = [
    "DEFAULT_ENCODING",
    "JPEG_BACKGROUND",
    "PNG_CODEC",
    "PNG_FORMAT",
    "WEBP_LOSSLESS_FORMAT",
    "Codec",
    "Encoding",
    "empty_tile",
    "gdal_encode",
]

#: Full-colour PNG (a palette would change the pixels of imagery), zlib level 1 with the
#: "average" row filter: measured on the Landsat tiles, 2.8x faster to encode than Mapnik's
#: default PNG settings (9 ms instead of 25 ms a tile) and 15% smaller. Tiles are written with
#: this filter by numpy and zlib-ng (:func:`shared.base.png.png_avg`), faster and smaller still;
#: Mapnik encodes so only an image it left premultiplied.
PNG_FORMAT = "png32:z=1:f=avg"
#: Lossless WebP (the pixels of the PNG) at libwebp's effort 1 of 0-6 (``method``); for lossless
#: WebP ``quality`` is effort too, and 0 costs nothing in size here.
WEBP_LOSSLESS_FORMAT = "webp:lossless=1:method=1:quality=0"
#: Lossy WebP: ``method`` 2 encodes in half libwebp's default time for 5% more bytes.
_WEBP_LOSSY_FORMAT = "webp:method=2:quality={quality}"
_JPEG_FORMAT = "jpeg{quality}"
#: What JPEG tiles (no alpha) show where the map is transparent, outside the raster or over
#: nodata: white, as RGB. A style with a ``background-color`` of its own shows that instead.
JPEG_BACKGROUND = (255, 255, 255)
#: Quality of the empty JPEG tile (one colour: any quality gives that colour back exactly).
_EMPTY_JPEG_QUALITY = 90


@dataclass(frozen=True)
class Codec:
    """A tile format and the Mapnik format string that encodes it: what a render needs."""

    format: TileFormat
    options: str


#: PNG tiles, whatever the settings
PNG_CODEC = Codec(TileFormat.PNG, PNG_FORMAT)


@dataclass(frozen=True)
class Encoding:
    """How tiles of each format are encoded (``MAPSVC_JPEG_QUALITY``, ``MAPSVC_WEBP_*``)."""

    jpeg_quality: int = 85
    webp_quality: int = 80
    webp_lossless: bool = False

    @classmethod
    def from_settings(cls, tiles: TileSettings) -> Encoding:
        """The encoding the tile settings name."""
        return cls(tiles.jpeg_quality, tiles.webp_quality, tiles.webp_lossless)

    def codec(self, tile_format: TileFormat) -> Codec:
        """How to encode a tile of ``tile_format``."""
        if tile_format is TileFormat.PNG:
            return PNG_CODEC
        if tile_format is TileFormat.WEBP:
            lossy = _WEBP_LOSSY_FORMAT.format(quality=self.webp_quality)
            return Codec(tile_format, WEBP_LOSSLESS_FORMAT if self.webp_lossless else lossy)
        return Codec(tile_format, _JPEG_FORMAT.format(quality=self.jpeg_quality))


#: the settings' defaults
DEFAULT_ENCODING = Encoding()


def gdal_encode(driver: str, pixels: np.ndarray, **options: Any) -> bytes:
    """``pixels`` (bands, rows, columns of bytes) as an image file of GDAL's ``driver``."""
    count, height, width = pixels.shape
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)  # an image, not a raster
        with MemoryFile() as mem:
            profile = {"width": width, "height": height, "count": count, "dtype": "uint8"}
            with mem.open(driver=driver, **profile, **options) as ds:
                ds.write(pixels)
            return bytes(mem.read())


@functools.cache
def empty_tile(tile_format: TileFormat, size: int) -> bytes:
    """A tile with nothing drawn, ``size`` pixels a side, encoded without Mapnik.

    Transparent, but for JPEG: ``JPEG_BACKGROUND``. The WebP tile is lossless whatever the
    settings (it is the smaller for it).
    """
    if tile_format is TileFormat.PNG:
        return transparent_png(size, size)
    if tile_format is TileFormat.WEBP:
        return gdal_encode("WEBP", np.zeros((4, size, size), np.uint8), LOSSLESS="TRUE")
    background = np.array(JPEG_BACKGROUND, np.uint8)[:, np.newaxis, np.newaxis]
    pixels = np.broadcast_to(background, (3, size, size))
    return gdal_encode("JPEG", np.ascontiguousarray(pixels), QUALITY=_EMPTY_JPEG_QUALITY)
