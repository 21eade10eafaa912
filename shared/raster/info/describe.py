"""The ``gdalinfo -json`` object of one raster file, read with rasterio under gdalinfo's GDAL."""

from __future__ import annotations

import os
import warnings
from typing import Any

import rasterio
from rasterio.crs import CRS
from rasterio.errors import NotGeoreferencedWarning

from shared.errors import UnprocessableError
from shared.raster.gdal import GDAL_ERRORS, gdal_message
from shared.raster.info.bands import band
from shared.raster.info.corners import corners
from shared.raster.info.crs import coordinate_system
from shared.raster.info.metadata import DATASET_DOMAINS, metadata
from shared.raster.info.numbers import atoi
from shared.raster.truncation import Level, SizeOf, check_not_truncated, overview_levels

__all__ = ["read"]

#: GDAL settings for the read. The first makes GDAL hand rasterio the dataset's CRS as WKT2:
#: the WKT1 it gives otherwise loses names and usage that gdalinfo prints. rasterio's defaults
#: for the other two differ from plain GDAL's, which gdalinfo runs with.
_GDAL_ENV: dict[str, Any] = {
    "OSR_WKT_FORMAT": "WKT2_2019",
    "GTIFF_IMPLICIT_JPEG_OVR": True,
    "CHECK_WITH_INVERT_PROJ": False,
}

_NO_GEOTRANSFORM = (0.0, 1.0, 0.0, 0.0, 0.0, 1.0)


def read(path: str, size_of: SizeOf = os.path.getsize) -> dict[str, Any]:
    """Open ``path``, check that none of its image data is cut off, and describe it.

    Args:
        path: a raster file as GDAL opens it; the path as given becomes ``description``.
        size_of: the size of a file of the raster (for the check of truncated data).

    Returns:
        The object ``gdalinfo -json`` prints for it.

    Raises:
        UnprocessableError: GDAL cannot open the file, or it is truncated; the message
            carries GDAL's own words.
    """
    name = path
    try:
        with rasterio.Env(**_GDAL_ENV) as env:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NotGeoreferencedWarning)
                dataset = rasterio.open(name)
            with dataset as ds:
                # rasterio hands out the identity where GDAL has no geotransform (and a
                # GeoTIFF cannot store the identity as one)
                has_geotransform = ds.transform.to_gdal() != _NO_GEOTRANSFORM
                levels = overview_levels(ds)
                check_not_truncated(ds, levels, size_of)
                return _describe(ds, name, env.drivers(), has_geotransform, levels)
    except GDAL_ERRORS as exc:
        raise UnprocessableError(f"{name}: {gdal_message(exc)}", path=name) from exc


def _describe(
    ds: Any, name: str, driver_names: dict[str, str], has_geotransform: bool, levels: list[Level]
) -> dict[str, Any]:
    info: dict[str, Any] = {
        "description": name,
        "driverShortName": ds.driver,
        "driverLongName": driver_names.get(ds.driver, ds.driver),
        "files": list(ds.files),
        "size": [ds.width, ds.height],
    }
    # sic: GDAL 3.6 puts width first in proj:shape too
    stac: dict[str, Any] = {"proj:shape": [ds.width, ds.height]}
    if ds.crs is not None:
        info["coordinateSystem"] = coordinate_system(ds.crs)
        stac["proj:wkt2"] = info["coordinateSystem"]["wkt"]
        projjson = ds.crs.to_dict(projjson=True)
        root_id = projjson.get("id") or (projjson.get("ids") or [{}])[0]
        if str(root_id.get("authority", "")).upper() == "EPSG":
            stac["proj:epsg"] = int(root_id["code"])
        stac["proj:projjson"] = projjson
    geotransform = list(ds.transform.to_gdal()) if has_geotransform else None
    if geotransform is not None:
        info["geoTransform"] = geotransform
        stac["proj:transform"] = list(geotransform)
    gcps, gcp_crs = ds.gcps
    if gcps:
        info["gcps"] = _gcps(gcps, gcp_crs)
    info["metadata"] = metadata(ds, None, DATASET_DOMAINS)
    cloud_cover = ds.tags(ns="IMAGERY").get("CLOUDCOVER")
    if cloud_cover is not None:
        stac["eo:cloud_cover"] = atoi(cloud_cover)
    if ds.width:
        info.update(corners(ds, geotransform))
    overview_sizes = [[level.width, level.height] for level in levels]
    bands = [band(ds, bidx, overview_sizes) for bidx in ds.indexes]
    info["bands"] = [item for item, _, _ in bands]
    stac["raster:bands"] = [raster for _, raster, _ in bands]
    stac["eo:bands"] = [eo for _, _, eo in bands]
    info["stac"] = stac
    return info


def _gcps(gcps: list[Any], gcp_crs: CRS | None) -> dict[str, Any]:
    result: dict[str, Any] = {}
    if gcp_crs is not None:
        result["coordinateSystem"] = coordinate_system(gcp_crs)
    result["gcpList"] = [
        {
            "id": gcp.id or "",
            "info": gcp.info or "",
            "pixel": gcp.col,
            "line": gcp.row,
            "x": gcp.x,
            "y": gcp.y,
            "z": gcp.z or 0.0,
        }
        for gcp in gcps
    ]
    return result
