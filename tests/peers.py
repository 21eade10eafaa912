"""The peer tools' command lines that the tests and the benchmarks compare mapsvc with."""

from __future__ import annotations

from shared.raster.compress import CREATION_OPTIONS

__all__ = ["TRANSLATE"]

#: ``gdal_translate`` doing what the compression job does (spec 4.3); add source and target
TRANSLATE = [
    "gdal_translate",
    "-q",
    "-ot",
    "Byte",
    "-of",
    "GTiff",
    "-b",
    "1",
    "-b",
    "2",
    "-b",
    "3",
    "-colorinterp",
    "red,green,blue",
]
for key, value in CREATION_OPTIONS.items():
    TRANSLATE += ["-co", f"{key}={value}"]
