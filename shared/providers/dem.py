"""Local elevation: DEM rasters in ``<workDir>/map/dem`` sampled with bilinear interpolation.

GeoTIFFs, SRTM ``.hgt`` files and zipped ``.hgt`` files (read through GDAL's ``/vsizip``)
are found by their suffix; each is opened once and kept open while its size and mtime stay
the same. Values are interpolated between the four pixel centres around a point; a nodata
neighbour is left out and the others' weights renormalised.
"""

from __future__ import annotations

import math
import os
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import rasterio
from rasterio.crs import CRS
from rasterio.warp import transform as warp_transform
from rasterio.windows import Window

__all__ = ["DemCatalog", "DemSample"]

_SUFFIXES = (".tif", ".tiff", ".hgt", ".zip")
_WGS84 = CRS.from_epsg(4326)


@dataclass(frozen=True)
class DemSample:
    """The elevation of one point, and the DEM it came from (None: no coverage)."""

    dataset: str | None
    elevation: float | None


@dataclass
class _Dem:
    name: str
    signature: tuple[int, int]
    dataset: Any  # an open rasterio dataset
    bounds: tuple[float, float, float, float]  # west, south, east, north in the DEM's CRS
    is_wgs84: bool
    lock: threading.Lock


def _gdal_paths(path: Path) -> list[tuple[str, str]]:
    """(name, GDAL path) of the DEMs in a file: itself, or the ``.hgt``/``.tif`` in a zip."""
    if path.suffix.lower() != ".zip":
        return [(path.name.split(".")[0], str(path))]
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return []
    return [
        (Path(m).name.split(".")[0], f"/vsizip/{path}/{m}")
        for m in members
        if m.lower().endswith((".hgt", ".tif", ".tiff"))
    ]


class DemCatalog:
    """The DEMs of a folder, opened lazily and kept open; safe to use from several threads."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._dems: dict[str, _Dem] = {}
        self._lock = threading.Lock()

    def _refresh(self) -> list[_Dem]:
        found: dict[str, tuple[Path, tuple[int, int]]] = {}
        if self.folder.is_dir():
            for entry in sorted(os.scandir(self.folder), key=lambda e: e.name):
                if entry.name.startswith(".") or not entry.name.lower().endswith(_SUFFIXES):
                    continue
                if not entry.is_file():
                    continue
                st = entry.stat()
                found[entry.path] = (Path(entry.path), (st.st_size, st.st_mtime_ns))
        with self._lock:
            for key in [k for k in self._dems if k.split("\0")[0] not in found]:
                self._dems.pop(key).dataset.close()
            for file_key, (path, signature) in found.items():
                for name, gdal_path in _gdal_paths(path):
                    key = f"{file_key}\0{gdal_path}"
                    known = self._dems.get(key)
                    if known is not None and known.signature == signature:
                        continue
                    if known is not None:
                        known.dataset.close()
                    try:
                        ds = rasterio.open(gdal_path)
                    except rasterio.errors.RasterioIOError:
                        continue  # not a raster GDAL can read: skipped, as the listing does
                    crs = ds.crs or _WGS84
                    b = ds.bounds
                    self._dems[key] = _Dem(
                        name,
                        signature,
                        ds,
                        (b.left, b.bottom, b.right, b.top),
                        crs == _WGS84,
                        threading.Lock(),
                    )
            return list(self._dems.values())

    def sample(self, points: list[tuple[float, float]]) -> list[DemSample]:
        """The elevations of ``(lon, lat)`` points (EPSG:4326); blocking, call from a thread.

        Args:
            points: the points.

        Returns:
            One sample per point, in order; ``elevation`` None where no DEM covers it.
        """
        dems = self._refresh()
        out: list[DemSample] = []
        for lon, lat in points:
            sample = DemSample(None, None)
            for dem in dems:
                value = _sample_one(dem, lon, lat)
                if value is not None:
                    sample = DemSample(dem.name, value)
                    break
            out.append(sample)
        return out

    def close(self) -> None:
        """Close every open DEM."""
        with self._lock:
            for dem in self._dems.values():
                dem.dataset.close()
            self._dems.clear()


def _sample_one(dem: _Dem, lon: float, lat: float) -> float | None:
    ds = dem.dataset
    x, y = lon, lat
    if not dem.is_wgs84:
        xs, ys = warp_transform(_WGS84, ds.crs, [lon], [lat])
        x, y = xs[0], ys[0]
    w, s, e, n = dem.bounds
    if not (w <= x <= e and s <= y <= n):
        return None
    col_f, row_f = ~ds.transform @ (x, y)
    # pixel centres are at .5: interpolate between the four centres around the point
    cx, cy = col_f - 0.5, row_f - 0.5
    c0 = min(max(math.floor(cx), 0), ds.width - 1)
    r0 = min(max(math.floor(cy), 0), ds.height - 1)
    c1, r1 = min(c0 + 1, ds.width - 1), min(r0 + 1, ds.height - 1)
    fx = min(max(cx - c0, 0.0), 1.0)
    fy = min(max(cy - r0, 0.0), 1.0)
    with dem.lock:  # one dataset handle is not safe across threads
        block = ds.read(1, window=Window(c0, r0, c1 - c0 + 1, r1 - r0 + 1), masked=True)
    values = np.ma.zeros((2, 2), dtype="float64")
    values.mask = np.ones((2, 2), dtype=bool)
    values[: block.shape[0], : block.shape[1]] = block
    if block.shape[0] == 1:
        values[1, :] = values[0, :]
    if block.shape[1] == 1:
        values[:, 1] = values[:, 0]
    weights = np.array([[(1 - fx) * (1 - fy), fx * (1 - fy)], [(1 - fx) * fy, fx * fy]])
    valid = ~np.ma.getmaskarray(values)
    total = float(weights[valid].sum())
    if not valid.any() or total <= 0:
        return None
    return float((np.ma.getdata(values)[valid] * weights[valid]).sum() / total)
