"""Coordinate-system helpers: proj4 text, EPSG:4326 extents, GeoJSON boxes."""

from __future__ import annotations

from typing import Any

from rasterio.crs import CRS
from rasterio.warp import transform_bounds

__all__ = ["extent_4326", "extent_polygon", "proj4"]


def proj4(crs: CRS) -> str:
    """The proj4 text of a CRS, flags written bare (``+no_defs``, not ``+no_defs=True``)."""
    return " ".join(
        f"+{key}" if value is True else f"+{key}={value}" for key, value in crs.to_dict().items()
    )


def extent_4326(crs: CRS, bounds: tuple[float, float, float, float]) -> list[float]:
    """``[min_lon, min_lat, max_lon, max_lat]`` of ``bounds`` given in ``crs``."""
    return [round(v, 9) for v in transform_bounds(crs, "EPSG:4326", *bounds, densify_pts=21)]


def extent_polygon(extent: list[float]) -> dict[str, Any]:
    """The GeoJSON Polygon of an extent ``[minx, miny, maxx, maxy]``."""
    x0, y0, x1, y1 = extent
    ring = [[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]]
    return {"type": "Polygon", "coordinates": [ring]}
