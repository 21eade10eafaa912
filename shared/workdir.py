"""The work dir's layout (spec section 1): one home for the names of its folders."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["WorkDir"]


@dataclass(frozen=True)
class WorkDir:
    """The folders below ``root`` (``MAPSVC_WORK_DIR``)."""

    root: Path

    @property
    def raster(self) -> Path:
        """``map/raster``: the source rasters."""
        return self.root / "map" / "raster"

    @property
    def rtile(self) -> Path:
        """``map/rtile``: the tile cache on disk."""
        return self.root / "map" / "rtile"

    @property
    def mapnik(self) -> Path:
        """``map/mapnik``: the Mapnik styles."""
        return self.root / "map" / "mapnik"

    @property
    def derived(self) -> Path:
        """``map/derived``: files built from the rasters (mosaics, builds)."""
        return self.root / "map" / "derived"

    @property
    def exports(self) -> Path:
        """``map/exports``: the MBTiles and PMTiles exports of layers, a folder per layer."""
        return self.root / "map" / "exports"

    @property
    def dem(self) -> Path:
        """``map/dem``: the local elevation rasters."""
        return self.root / "map" / "dem"
