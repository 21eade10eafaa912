"""Mapnik, imported so that it and rasterio share one working PROJ database.

The mapnik wheel points ``PROJ_LIB`` at a folder of its own that holds no ``proj.db``, which
breaks every EPSG lookup of rasterio in the same process once mapnik is imported. Pointing
``PROJ_LIB`` at rasterio's PROJ data first (unless the user set it) serves both. Import Mapnik
only through this module: ``from shared.mapnik_env import mapnik``. It also lets GDAL decode
the blocks of one read on several threads (``GDAL_NUM_THREADS``).
"""

from __future__ import annotations

import os
from pathlib import Path

import rasterio

_PROJ_DATA = Path(rasterio.__file__).parent / "proj_data"
if _PROJ_DATA.is_dir():
    os.environ.setdefault("PROJ_LIB", str(_PROJ_DATA))
    os.environ.setdefault("PROJ_DATA", str(_PROJ_DATA))

# A tile read at a source's full resolution decodes several compressed blocks; GDAL decodes
# them on threads of its own when asked (the slowest zoom of a big raster without overviews of
# its own: ~45 -> ~35 ms cold, tests/bench/bench_zooms.py). The user's value wins.
os.environ.setdefault("GDAL_NUM_THREADS", "ALL_CPUS")

import mapnik  # noqa: E402 - must follow the environment set above

__all__ = ["mapnik"]
