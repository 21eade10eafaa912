"""Mapnik, imported so that it and rasterio share one working PROJ database.

The mapnik wheel points ``PROJ_LIB`` at a folder of its own that holds no ``proj.db``, which
breaks every EPSG lookup of rasterio in the same process once mapnik is imported. Pointing
``PROJ_LIB`` at rasterio's PROJ data first (unless the user set it) serves both. Import Mapnik
only through this module: ``from shared.mapnik_env import mapnik``.
"""

from __future__ import annotations

import os
from pathlib import Path

import rasterio

_PROJ_DATA = Path(rasterio.__file__).parent / "proj_data"
if _PROJ_DATA.is_dir():
    os.environ.setdefault("PROJ_LIB", str(_PROJ_DATA))
    os.environ.setdefault("PROJ_DATA", str(_PROJ_DATA))

import mapnik  # noqa: E402 - must follow the environment set above

__all__ = ["mapnik"]
