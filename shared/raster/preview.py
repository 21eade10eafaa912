"""The preview of a raster file: one tenth of its resolution, with internal overviews.

The Mapnik XML draws a layer's previews where the map's pixels are at least half a preview's
(5 source pixels), so that a whole large raster is never read for a small map.
"""

from __future__ import annotations

import math
from pathlib import Path

import rasterio
from rasterio.enums import Resampling

from shared.base.files import atomic_path
from shared.raster.overviews import reduced_profile

__all__ = ["PREVIEW_FACTOR", "SMALL_RASTER_PX", "write_preview"]

PREVIEW_FACTOR = 10
#: Rasters whose sides are all at most this many pixels get no preview: it would be smaller
#: than a tile.
SMALL_RASTER_PX = 2560
#: The preview's own overviews stop before they are smaller than this many pixels.
_MIN_OVERVIEW_PX = 128


def write_preview(src: Path, dst: Path, resampling: Resampling) -> tuple[int, int]:
    """Write the preview of ``src`` to ``dst``, reduced with ``resampling``.

    Returns:
        The preview's width and height.
    """
    with rasterio.open(src) as ds:
        width = max(1, math.ceil(ds.width / PREVIEW_FACTOR))
        height = max(1, math.ceil(ds.height / PREVIEW_FACTOR))
        data = ds.read(out_shape=(ds.count, height, width), resampling=resampling)
        profile = reduced_profile(ds, width, height)
        colorinterp = ds.colorinterp
    with atomic_path(dst) as tmp:
        with rasterio.open(tmp, "w", **profile) as out:
            out.write(data)
            out.colorinterp = colorinterp
            factors = [2**i for i in range(1, 10) if min(width, height) / 2**i >= _MIN_OVERVIEW_PX]
            if factors:
                out.build_overviews(factors, resampling)
    return width, height
