"""GDAL as rasterio shows it: its errors, its messages, its data type names."""

from __future__ import annotations

import os
from pathlib import PurePosixPath

from rasterio._err import CPLE_BaseError
from rasterio.errors import RasterioError

__all__ = ["GDAL_ERRORS", "GDAL_TYPES", "file_name", "gdal_message", "is_vsi"]

#: What reading or writing a raster may raise: rasterio's errors, GDAL's (which rasterio
#: raises as they are from some calls, such as copies), and the OS's.
GDAL_ERRORS = (RasterioError, CPLE_BaseError, OSError)

#: GDAL's name of each numpy data type rasterio uses.
GDAL_TYPES = {
    "uint8": "Byte",
    "int8": "Int8",
    "uint16": "UInt16",
    "int16": "Int16",
    "uint32": "UInt32",
    "int32": "Int32",
    "uint64": "UInt64",
    "int64": "Int64",
    "float32": "Float32",
    "float64": "Float64",
    "complex_int16": "CInt16",
    "complex64": "CFloat32",
    "complex128": "CFloat64",
}

_GENERIC = ("See previous exception", "Read or write failed")


def gdal_message(exc: BaseException) -> str:
    """The messages of ``exc`` and its causes, most general first, without rasterio's filler.

    Args:
        exc: an exception raised by rasterio (or any other).

    Returns:
        One line, e.g. ``corrupt.tif, band 1: IReadBlock failed …; TIFFFillTile: Read error …``.
    """
    messages: list[str] = []
    current: BaseException | None = exc
    while current is not None and len(messages) < 10:
        text = str(current).strip()
        if text and not any(g in text for g in _GENERIC) and text not in messages:
            messages.append(text)
        current = current.__cause__ or current.__context__
    return "; ".join(messages) or type(exc).__name__


def is_vsi(path: str | os.PathLike[str]) -> bool:
    """Whether GDAL reads ``path`` through a virtual file system (``/vsis3/…``), not a local one.

    Such a path is always absolute to GDAL: a VRT or a map names it as it is.
    """
    return os.fspath(path).startswith("/vsi")


def file_name(path: str | os.PathLike[str]) -> str:
    """The last name of a local or a GDAL virtual path (``/vsis3/b/x/a.tif`` -> ``a.tif``)."""
    return PurePosixPath(os.fspath(path)).name
