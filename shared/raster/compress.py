"""Compression of a layer's rasters (spec 4.3) into ``<rasterPath>/commpress``.

The options are exactly the spec's: output type Byte, LZW, threads = all CPUs, predictor 2,
BigTIFF, GTiff, tiled, bands 1,2,3 as red, green, blue. The copy is what ``gdal_translate``
does (a band-subset VRT copied by GDAL), in-process. It is written into the layer's own store:
beside the sources on a file system, under the same prefix in a bucket (written locally, then
uploaded whole).
"""

from __future__ import annotations

import posixpath
import time
from pathlib import Path
from typing import Any

import rasterio
import rasterio.shutil

from shared.base.files import atomic_path
from shared.errors import UnprocessableError
from shared.jobs import JobReporter
from shared.raster.catalog import COMPRESS_DIR, layer_files
from shared.raster.gdal import GDAL_ERRORS, file_name, gdal_message
from shared.raster.layer import locate_layer
from shared.raster.paths import raster_root
from shared.raster.store import FileRasterStore, RasterStore
from shared.raster.vrt import RasterPath, band_subset_vrt

__all__ = ["CREATION_OPTIONS", "compress_file", "compress_layer", "compressed_name"]

CREATION_OPTIONS = {
    "COMPRESS": "LZW",
    "NUM_THREADS": "ALL_CPUS",
    "PREDICTOR": "2",
    "BIGTIFF": "YES",
    "TILED": "YES",
}
BANDS = [1, 2, 3]
COLOR_INTERP = ["Red", "Green", "Blue"]


def compressed_name(source: RasterPath) -> str:
    """The name of a raster's compressed copy: its own name, ``.tif`` added to a VRT's.

    Two rasters of one folder never share a copy (``x.tif`` and ``x.vrt`` give ``x.tif`` and
    ``x.vrt.tif``).
    """
    name = file_name(source)
    return name if Path(name).suffix.lower() in (".tif", ".tiff") else f"{name}.tif"


def compress_file(source: RasterPath, target: Path) -> None:
    """Write the compressed copy of ``source`` (local or ``/vsis3/…``) to ``target`` (atomically).

    Raises:
        UnprocessableError: the raster cannot be read or has fewer than 3 bands.
    """
    vrt = band_subset_vrt(source, BANDS, "Byte", COLOR_INTERP)
    with atomic_path(target) as tmp:
        try:
            with rasterio.open(vrt) as src:
                rasterio.shutil.copy(src, tmp, driver="GTiff", **CREATION_OPTIONS)
        except GDAL_ERRORS as exc:
            name = file_name(source)
            raise UnprocessableError(f"{name}: {gdal_message(exc)}", file=name) from exc


def compress_layer(
    work_dir: Path, rel_path: str, report: JobReporter, *, rasters: RasterStore | None = None
) -> dict[str, Any]:
    """Compress every raster of a layer, one metadata line per file.

    Args:
        work_dir: the service's work dir.
        rel_path: the layer's file or folder, relative to the raster root.
        report: the job's reporter.
        rasters: the raster store (default: the folder ``<workDir>/map/raster``).

    Returns:
        ``folder`` (where the copies are, relative to the raster root) and ``files``: each
        file's ``name``, ``size`` before and ``compressed`` after, ``ratio``, ``ms``, ``err``.

    Raises:
        NotFoundError: no raster at the path.
        UnprocessableError: some files could not be compressed (the others are).
        UnavailableError: the object storage cannot be reached (nothing more is compressed).
    """
    rasters = rasters or FileRasterStore(raster_root(work_dir))
    where = locate_layer(work_dir, rel_path, rasters=rasters)
    files = layer_files(rasters, where.rel_path)
    folder = where.rel_path if where.is_dir else posixpath.dirname(where.rel_path)
    out_dir = posixpath.join(folder, COMPRESS_DIR)
    report.line(f"Start compression: {len(files)} file(s) -> {COMPRESS_DIR}/")
    results = []
    for i, file in enumerate(files, start=1):
        t0 = time.monotonic()
        before = file.size or 0
        try:
            with rasters.writing(posixpath.join(out_dir, compressed_name(file.name))) as target:
                compress_file(file.gdal_path, target)
                after = target.stat().st_size
        except UnprocessableError as exc:
            results.append(
                {
                    "name": file.name,
                    "size": before,
                    "compressed": None,
                    "ratio": None,
                    "ms": int((time.monotonic() - t0) * 1000),
                    "err": exc.message,
                }
            )
            report.line(f"{file.name}: failed: {exc.message}", progress=i / len(files))
            continue
        ms = int((time.monotonic() - t0) * 1000)
        results.append(
            {
                "name": file.name,
                "size": before,
                "compressed": after,
                "ratio": round(after / before, 4),
                "ms": ms,
                "err": "",
            }
        )
        report.line(
            f"{file.name}: {before} -> {after} bytes, ratio {after / before:.3f}, {ms} ms",
            progress=i / len(files),
        )
    failed = [r for r in results if r["err"]]
    if failed:
        raise UnprocessableError(
            f"{len(failed)} of {len(files)} file(s) could not be compressed: {failed[0]['err']}",
            files=failed,
        )
    return {"folder": rasters.item(out_dir).rel_path, "files": results}
