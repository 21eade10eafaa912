"""The values of a raster layer at a point, as TiTiler's ``/point`` answers them.

The pixel is the one the point falls in (``gdallocationinfo -wgs84``'s), read from the layer's
source at its full resolution; a band's nodata, NaN or masked value is null. With an
expression, its blocks' values (a value that is not finite, a division by zero, is null).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numexpr
import numpy as np
import rasterio
from rasterio.warp import transform
from rasterio.windows import Window

from shared.errors import NotFoundError, UnprocessableError
from shared.raster.gdal import GDAL_ERRORS, gdal_message
from shared.raster.rendering import Rendering

__all__ = ["point_values"]


def _number(value: Any, valid: bool) -> float | int | None:
    if not valid:
        return None
    number = value.item() if hasattr(value, "item") else value
    if isinstance(number, float) and not math.isfinite(number):
        return None
    return number  # type: ignore[no-any-return]


def point_values(source: Path, lon: float, lat: float, rendering: Rendering) -> dict[str, Any]:
    """The values of ``source`` at ``lon``, ``lat`` (WGS 84).

    Returns:
        ``coordinates`` ([lon, lat]), ``values`` (one per band read, or per expression block),
        ``band_names`` (``b1``…, or the expression's blocks).

    Raises:
        NotFoundError: the point is outside the raster.
        UnprocessableError: the source cannot be read.
    """
    try:
        with rasterio.open(source) as ds:
            xs, ys = transform("EPSG:4326", ds.crs, [lon], [lat])
            inside = math.isfinite(xs[0]) and math.isfinite(ys[0])  # off the CRS's area: inf
            row, col = ds.index(xs[0], ys[0]) if inside else (-1, -1)
            if not (0 <= row < ds.height and 0 <= col < ds.width):
                raise NotFoundError("the point is outside the raster", lon=lon, lat=lat)
            bands = list(rendering.bands_read or range(1, ds.count + 1))
            data = ds.read(bands, window=Window(col, row, 1, 1), masked=True)
            if rendering.nodata is not None:
                data = np.ma.masked_values(data, rendering.nodata, copy=False)
    except GDAL_ERRORS as exc:
        raise UnprocessableError(f"{source.name}: {gdal_message(exc)}", file=source.name) from exc
    valid = ~np.ma.getmaskarray(data)[:, 0, 0]
    values = [_number(v, bool(ok)) for v, ok in zip(data.data[:, 0, 0], valid, strict=True)]
    names = [f"b{band}" for band in bands]
    if rendering.expression:
        blocks = rendering.expression.split(";")
        local = {
            name: float("nan") if v is None else float(v)
            for name, v in zip(names, values, strict=True)
        }
        with np.errstate(all="ignore"):
            results = [numexpr.evaluate(block, local_dict=local).item() for block in blocks]
        values = [_number(float(r), True) for r in results]
        names = blocks
    return {"coordinates": [lon, lat], "values": values, "band_names": names}
