"""Raster statistics (spec 2.3): file times and sizes, and a descriptor per raster file."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import rasterio

from shared.raster.catalog import layer_files
from shared.raster.gdal import GDAL_ERRORS, gdal_message
from shared.raster.geo import extent_4326, extent_polygon, proj4
from shared.raster.store import RasterStore, StoredItem
from shared.raster.truncation import check_not_truncated

__all__ = ["describe_file", "raster_stat"]


def _iso(ts: float) -> str:
    # spec 2.3: ISO 8601 without zone offset; the times are UTC
    return datetime.fromtimestamp(ts, UTC).replace(tzinfo=None).isoformat(timespec="seconds")


def describe_file(rasters: RasterStore, file: StoredItem) -> dict[str, Any]:
    """The descriptor of one raster file (spec 2.3), with ``err`` set when it cannot be read.

    Args:
        rasters: the store of the file (it knows the sizes of the raster's files).
        file: the raster file.

    Returns:
        ``name``, ``size``, ``extent`` and ``geom`` (EPSG:4326), ``bands``, ``crs`` (proj4),
        ``rasterSize``, ``err`` (empty when all is well, else GDAL's words on why it cannot be
        read or where it is truncated) and ``time`` (ms spent reading).
    """
    t0 = time.monotonic()
    info: dict[str, Any] = {
        "name": file.name,
        "size": file.size,
        "extent": None,
        "geom": None,
        "bands": "",
        "crs": "",
        "rasterSize": None,
        "err": "",
    }
    try:
        with rasterio.open(file.gdal_path) as ds:
            info["rasterSize"] = [ds.width, ds.height]
            info["bands"] = ",".join(ci.name.capitalize() for ci in ds.colorinterp)
            if ds.crs is None:
                info["err"] = "the raster has no coordinate system"
            else:
                info["crs"] = proj4(ds.crs)
                extent = extent_4326(ds.crs, ds.bounds)
                info["extent"] = extent
                info["geom"] = extent_polygon(extent)
            check_not_truncated(ds, size_of=rasters.file_size)
    except GDAL_ERRORS as exc:
        info["err"] = gdal_message(exc)
    info["time"] = int((time.monotonic() - t0) * 1000)
    return info


def raster_stat(rasters: RasterStore, rel_path: str) -> dict[str, Any]:
    """Statistics of a raster file or folder (spec 2.3, without ``time``).

    A folder's times are its own on a file system; in a bucket, which has no folders, those of
    its oldest and its newest object.

    Raises:
        InvalidInputError: the path leads outside the raster root.
        NotFoundError: nothing at the path, or a folder without rasters.
        UnavailableError: the object storage cannot be reached.
    """
    item = rasters.item(rel_path)
    files = layer_files(rasters, rel_path)
    if not item.is_dir:
        return {
            "type": "file",
            "stat": {
                "cdate": _iso(item.created),
                "edate": _iso(item.modified),
                "size": item.size,
                "count": 1,
            },
            "files": [describe_file(rasters, item)],
        }
    entries = []
    for file in files:
        entry: dict[str, Any] = {"name": file.name}
        err = describe_file(rasters, file)["err"]
        if err:
            entry["err"] = err
        entries.append(entry)
    return {
        "type": "dir",
        "stat": {
            "cdate": _iso(item.created),
            "edate": _iso(item.modified),
            "size": None,
            "count": len(files),
        },
        "files": entries,
    }
