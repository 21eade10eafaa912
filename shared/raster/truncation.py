"""The truncated-raster check: every GeoTIFF block must lie inside its file."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import rasterio
from rasterio.errors import RasterioIOError
from rasterio.windows import Window

__all__ = ["Level", "SizeOf", "check_not_truncated", "overview_levels"]

#: The size in bytes of a file GDAL names (a local path, or a ``/vsis3/`` one); OSError if none.
SizeOf = Callable[[str], int]


@dataclass(frozen=True)
class Level:
    """A resolution level (-1 the full one, else the overview's index) and its layout."""

    index: int
    width: int
    height: int
    blocks: list[tuple[int, int]]  # per band, (rows, columns)


def overview_levels(ds: Any) -> list[Level]:
    """The overview levels of the first band (rasterio itself only gives decimation factors).

    Args:
        ds: an open rasterio dataset.

    Returns:
        One ``Level`` per overview, largest first.
    """
    levels = []
    for index in range(len(ds.overviews(1)) if ds.count else 0):
        with rasterio.open(ds.name, overview_level=index) as overview:
            levels.append(
                Level(index, overview.width, overview.height, list(overview.block_shapes))
            )
    return levels


def check_not_truncated(
    ds: Any, levels: Sequence[Level] | None = None, size_of: SizeOf = os.path.getsize
) -> None:
    """Raise if a GeoTIFF block lies (partly) past the end of its file, in GDAL's words.

    Reading every block would cost as much as the file. The TIFF directory has each block's
    offset and size: this checks those, for every band (the first only when pixels are
    interleaved) at full resolution and at each overview level, and reads only a block found
    wanting, to let GDAL say what is wrong. Other formats pass unchecked.

    Args:
        ds: an open rasterio dataset.
        levels: its overview levels, when the caller has read them already.
        size_of: how the sizes of its files are found (in object storage, by the store).

    Raises:
        RasterioIOError: a block ends past the end of the file; the message is GDAL's when
            reading the block fails, else it names the block.
    """
    if ds.driver != "GTiff" or not ds.count:
        return
    pixel_interleaved = ds.tags(ns="IMAGE_STRUCTURE").get("INTERLEAVE") == "PIXEL"
    bands = list(ds.indexes[:1] if pixel_interleaved else ds.indexes)
    size = size_of(ds.name)
    # overviews come from the .ovr file when there is one
    ovr = f"{ds.name}.ovr"
    ovr_size = size_of(ovr) if ovr in ds.files else size
    full = Level(-1, ds.width, ds.height, list(ds.block_shapes))
    for level in [full, *(overview_levels(ds) if levels is None else levels)]:
        file_size = size if level is full else ovr_size
        for bidx in bands:
            _check_blocks(ds, level, bidx, file_size)


def _check_blocks(ds: Any, level: Level, bidx: int, file_size: int) -> None:
    overview = None if level.index < 0 else level.index
    block_rows, block_cols = level.blocks[bidx - 1]
    for row in range(math.ceil(level.height / block_rows)):
        for col in range(math.ceil(level.width / block_cols)):
            offset = ds.get_tag_item(f"BLOCK_OFFSET_{col}_{row}", "TIFF", bidx, overview)
            size = ds.get_tag_item(f"BLOCK_SIZE_{col}_{row}", "TIFF", bidx, overview)
            if offset is None or size is None or int(offset) + int(size) <= file_size:
                continue
            window = Window(
                col * block_cols,
                row * block_rows,
                min(block_cols, level.width - col * block_cols),
                min(block_rows, level.height - row * block_rows),
            )
            options = {} if overview is None else {"overview_level": overview}
            with rasterio.open(ds.name, **options) as source:
                source.read(bidx, window=window)  # for GDAL's own words, if it has some
            where = "" if overview is None else f" of overview {overview + 1}"
            raise RasterioIOError(
                f"block {col},{row} of band {bidx}{where} ends past the end of the file "
                f"({int(offset) + int(size)} > {file_size} bytes)"
            )
