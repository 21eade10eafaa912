"""Corner coordinates and the long/lat extent ring, at gdalinfo's precision."""

from __future__ import annotations

import math
from typing import Any

from rasterio.crs import CRS
from rasterio.errors import RasterioError
from rasterio.warp import transform as warp_transform

from shared.raster.info.crs import long_lat_crs
from shared.raster.info.numbers import rounded

__all__ = ["corners"]


def corners(ds: Any, geotransform: list[float] | None) -> dict[str, Any]:
    """``cornerCoordinates`` and the long/lat ring (``wgs84Extent``, or ``extent`` off Earth).

    Args:
        ds: the open dataset.
        geotransform: its GDAL geotransform, None when it has none.

    Returns:
        The two items of gdalinfo's object.
    """
    pixels = {
        "upperLeft": (0.0, 0.0),
        "lowerLeft": (0.0, float(ds.height)),
        "lowerRight": (float(ds.width), float(ds.height)),
        "upperRight": (float(ds.width), 0.0),
        "center": (ds.width / 2.0, ds.height / 2.0),
    }
    points: dict[str, list[Any]] = {}
    for key, (col, row) in pixels.items():
        if geotransform is None:
            points[key] = [rounded(col, 1), rounded(row, 1)]
            continue
        x, y = _georeference(geotransform, col, row)
        # gdalinfo's precision: 7 decimals where the numbers look like degrees, else 3
        digits = 7 if abs(x) < 181 and abs(y) < 91 else 3
        points[key] = [rounded(x, digits), rounded(y, digits)]

    ring: list[list[Any]] = []
    to_wgs84 = False
    if geotransform is not None and ds.crs is not None:
        target, to_wgs84 = long_lat_crs(ds.crs)
        if target is not None:
            order = ("upperLeft", "lowerLeft", "lowerRight", "upperRight", "upperLeft")
            outline = [_georeference(geotransform, *pixels[key]) for key in order]
            ring = _long_lat_ring(ds.crs, target, outline)
    extent = {"type": "Polygon", "coordinates": [ring]}
    return {"cornerCoordinates": points, ("wgs84Extent" if to_wgs84 else "extent"): extent}


def _georeference(geotransform: list[float], col: float, row: float) -> tuple[float, float]:
    x = geotransform[0] + geotransform[1] * col + geotransform[2] * row
    y = geotransform[3] + geotransform[4] * col + geotransform[5] * row
    return x, y


def _long_lat_ring(source: CRS, target: CRS, points: list[tuple[float, float]]) -> list[list[Any]]:
    xs, ys = [x for x, _ in points], [y for _, y in points]
    try:
        lons, lats = warp_transform(source, target, xs, ys)
    except (RasterioError, ValueError):
        return []
    # a corner that does not transform is left out, as gdalinfo does
    return [
        [rounded(lon, 7), rounded(lat, 7)]
        for lon, lat in zip(lons, lats, strict=True)
        if math.isfinite(lon) and math.isfinite(lat)
    ]
