"""Raster metadata in the shape of ``gdalinfo -json`` (GDAL 3.6), read in-process with rasterio.

``describe`` builds the object from ``bands``, ``corners``, ``crs`` (WKT2 text), ``metadata``
and ``numbers`` (gdalinfo's number quirks); ``readers`` runs each file in a thread of its own.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from shared.errors import NotFoundError
from shared.raster.gdal import is_vsi
from shared.raster.info.describe import read
from shared.raster.info.readers import ThreadPerFile
from shared.raster.truncation import SizeOf

__all__ = ["raster_info"]

_READERS = ThreadPerFile(read)


def raster_info(path: str | Path, size_of: SizeOf = os.path.getsize) -> dict[str, Any]:
    """Describe a raster file as ``gdalinfo -json`` (GDAL 3.6) does, without running it.

    Args:
        path: a GeoTIFF or VRT file, local or a GDAL virtual path (``/vsis3/…``); the path
            string as given becomes ``description`` and the base of the ``files`` entries.
        size_of: the size of a file of the raster (for the check of truncated data).

    Returns:
        The object ``gdalinfo -json`` prints: driver, files, size, coordinate system,
        geotransform, GCPs, metadata, corner coordinates, long/lat extent, bands and ``stac``.

    Raises:
        NotFoundError: there is no local file at ``path`` (a virtual one is checked by GDAL).
        UnprocessableError: GDAL cannot open the file, or a block of its image data lies past
            the end of the file; the message carries GDAL's own words.
    """
    name = os.fspath(path)
    if not is_vsi(name) and not Path(name).is_file():
        raise NotFoundError(f"raster not found: {name}", path=name)
    return _READERS.run(name, size_of)
