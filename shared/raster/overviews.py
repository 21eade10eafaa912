"""Overviews of a layer's source, so that every zoom reads about as many pixels as a tile has.

A source GDAL reports overviews for (internal ones, or an ``.ovr`` beside it) is read as it is.
For any other, the configuration writes into the layer's build folder:

- ``overview-<f>.tif``: the source reduced ``f`` times, for ``f`` = 2, 4, 8, … until the level
  fits in a tile; each level is computed from the one before, with the layer's resampling;
- ``overviews.vrt``: a VRT of the source that names those files as its overviews (written
  last: its presence means the levels are complete).

Nothing is ever written beside the source: the raster folders stay as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import rasterio
from affine import Affine
from rasterio.enums import Resampling
from rasterio.io import DatasetReader
from rasterio.windows import Window

from shared.base.files import atomic_path, write_atomic
from shared.errors import UnprocessableError
from shared.raster.gdal import GDAL_ERRORS, GDAL_TYPES, gdal_message
from shared.raster.vrt import band_subset_vrt, with_overviews

__all__ = [
    "OVERVIEWS_VRT",
    "build_overviews",
    "has_overviews",
    "overview_factors",
    "reduced_profile",
]

#: The file of a build folder that draws the source through its overviews.
OVERVIEWS_VRT = "overviews.vrt"
#: Levels are added until the last one fits in a tile of this many pixels.
TILE_PX = 256
#: Levels are written in blocks of a tile: a tile's reads touch few of them.
_BLOCK = 256
#: About how many bytes of the finer level one step of a reduction reads at once.
_STRIP_BYTES = 64 * 2**20
#: Lines on the job's stream at each tenth of the work.
_LINE_EVERY = 0.1

#: Told of the work: a line of text, and the fraction of the overviews done (0 to 1).
Progress = Callable[[str, float], None]


def overview_factors(width: int, height: int) -> list[int]:
    """The reduction factors of the overviews of a ``width`` x ``height`` raster.

    2, 4, 8, … until the level's longer side is at most a tile (256 px); none for a raster
    that fits in a tile already.
    """
    factors: list[int] = []
    while max(width, height) > TILE_PX * (factors[-1] if factors else 1):
        factors.append(2 * factors[-1] if factors else 2)
    return factors


def reduced_profile(ds: DatasetReader, width: int, height: int) -> dict[str, Any]:
    """The creation profile of ``ds`` reduced to ``width`` x ``height``: the same bands, type,
    place and nodata, tiled in blocks of a tile, deflate-compressed."""
    return {
        "driver": "GTiff",
        "dtype": ds.dtypes[0],
        "count": ds.count,
        "width": width,
        "height": height,
        "crs": ds.crs,
        "transform": ds.transform @ Affine.scale(ds.width / width, ds.height / height),
        "nodata": ds.nodata,
        "tiled": True,
        "blockxsize": _BLOCK,
        "blockysize": _BLOCK,
        "compress": "deflate",
        "bigtiff": "IF_SAFER",
    }


def has_overviews(source: Path) -> bool:
    """Whether GDAL reads reduced views of ``source`` from overviews of its own."""
    with rasterio.open(source) as ds:
        return bool(ds.overviews(1))


@dataclass
class _Work:
    """Counts the pixels read so far and says so at each tenth of all of them."""

    total: int
    progress: Progress
    done: int = 0
    said: float = 0.0

    @property
    def fraction(self) -> float:
        return self.done / self.total

    def add(self, pixels: int) -> None:
        self.done += pixels
        if self.fraction - self.said >= _LINE_EVERY and self.fraction < 1:
            self.said = math.floor(self.fraction / _LINE_EVERY) * _LINE_EVERY
            self.progress(f"Overviews: {round(self.fraction * 100)}%", self.fraction)


def build_overviews(
    source: Path, build: Path, resampling: Resampling, progress: Progress
) -> Path | None:
    """Write the overviews of ``source`` (a raster without any) and their VRT into ``build``.

    Args:
        source: the layer's raster (a file, or a folder's mosaic VRT).
        build: the build folder.
        resampling: how pixels are combined into the pixel of a level.
        progress: told of each finished level and of each tenth of the work.

    Returns:
        The VRT (``overviews.vrt``), or None when the source fits in a tile.

    Raises:
        UnprocessableError: the source cannot be read, or a level cannot be written.
    """
    try:
        with rasterio.open(source) as ds:
            width, height, count = ds.width, ds.height, ds.count
            data_type = GDAL_TYPES[ds.dtypes[0]]
            color_interp = [c.name.capitalize() for c in ds.colorinterp]
        factors = overview_factors(width, height)
        if not factors:
            return None
        # each level reads the one before: the source once, then about a quarter of it, …
        finer_sizes = [(math.ceil(width / f), math.ceil(height / f)) for f in [1, *factors[:-1]]]
        work = _Work(sum(w * h for w, h in finer_sizes), progress)
        levels, finer = [], source
        for i, factor in enumerate(factors, start=1):
            level = build / f"overview-{factor}.tif"
            w, h = _reduce(finer, level, resampling, work.add)
            progress(f"Overview {i}/{len(factors)}: 1/{factor} -> {w}x{h}", work.fraction)
            levels.append(level)
            finer = level
        xml = band_subset_vrt(source, list(range(1, count + 1)), data_type, color_interp, build)
    except GDAL_ERRORS as exc:
        raise UnprocessableError(f"{source.name}: {gdal_message(exc)}", file=source.name) from exc
    vrt = build / OVERVIEWS_VRT
    write_atomic(vrt, with_overviews(xml, levels, build))
    return vrt


def _reduce(
    finer: Path, level: Path, resampling: Resampling, read: Callable[[int], None]
) -> tuple[int, int]:
    """Write ``finer`` reduced by two into ``level``, a strip of rows at a time.

    Returns:
        The level's width and height.
    """
    with rasterio.open(finer) as ds:
        width, height = math.ceil(ds.width / 2), math.ceil(ds.height / 2)
        profile = reduced_profile(ds, width, height)
        row_bytes = ds.width * ds.count * np.dtype(ds.dtypes[0]).itemsize
        # whole blocks of the level at a time: each is compressed and written once
        rows = max(1, _STRIP_BYTES // row_bytes // (2 * _BLOCK)) * 2 * _BLOCK
        with atomic_path(level) as tmp, rasterio.open(tmp, "w", **profile) as out:
            for top in range(0, ds.height, rows):
                n = min(rows, ds.height - top)
                out_rows = math.ceil(n / 2)
                data = ds.read(
                    window=Window(0, top, ds.width, n),
                    out_shape=(ds.count, out_rows, width),
                    resampling=resampling,
                )
                out.write(data, window=Window(0, top // 2, width, out_rows))
                read(n * ds.width)
    return width, height
