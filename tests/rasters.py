"""Small GeoTIFFs made in a test, for the unit tests of the raster and tile code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import rasterio
from affine import Affine

__all__ = ["write_raster"]


def write_raster(
    path: Path,
    data: np.ndarray,
    bounds: tuple[float, float, float, float],
    crs: str = "EPSG:3857",
    **profile: Any,
) -> Path:
    """Write ``data`` (bands, rows, columns) as a GeoTIFF covering ``bounds`` in ``crs``.

    Args:
        path: the file to write (its folder is created).
        data: the pixels; their dtype is the file's.
        bounds: ``(west, south, east, north)`` in ``crs``.
        crs: the coordinate system.
        profile: more creation options (``nodata``, ``tiled``, ``blockxsize`` …).

    Returns:
        ``path``.
    """
    count, height, width = data.shape
    west, south, east, north = bounds
    # north up, square to the bounds (rasterio's from_bounds warns of affine's `*`)
    transform = Affine((east - west) / width, 0.0, west, 0.0, -(north - south) / height, north)
    path.parent.mkdir(parents=True, exist_ok=True)
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        width=width,
        height=height,
        count=count,
        dtype=data.dtype.name,
        crs=crs,
        transform=transform,
        **profile,
    ) as ds:
        ds.write(data)
    return path
