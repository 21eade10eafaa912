"""Compression of a layer's rasters (spec 4.3) into ``<rasterPath>/commpress``.

The options are exactly the spec's: output type Byte, LZW, threads = all CPUs, predictor 2,
BigTIFF, GTiff, tiled, bands 1,2,3 as red, green, blue. The copy is what ``gdal_translate``
does (a band-subset VRT copied by GDAL), in-process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import rasterio
import rasterio.shutil

from shared.errors import MapsvcError, UnprocessableError
from shared.jobs import JobReporter
from shared.raster.catalog import COMPRESS_DIR, layer_files
from shared.raster.files import atomic_path
from shared.raster.gdal import GDAL_ERRORS, gdal_message
from shared.raster.layer import locate_layer
from shared.raster.paths import raster_root
from shared.raster.vrt import band_subset_vrt

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


def compressed_name(source: Path) -> str:
    """The name of a raster's compressed copy: its own name, ``.tif`` added to a VRT's.

    Two rasters of one folder never share a copy (``x.tif`` and ``x.vrt`` give ``x.tif`` and
    ``x.vrt.tif``).
    """
    return source.name if source.suffix.lower() in (".tif", ".tiff") else f"{source.name}.tif"


def compress_file(source: Path, target: Path) -> None:
    """Write the compressed copy of ``source`` to ``target`` (atomically).

    Raises:
        UnprocessableError: the raster cannot be read or has fewer than 3 bands.
    """
    vrt = band_subset_vrt(source, BANDS, "Byte", COLOR_INTERP)
    with atomic_path(target) as tmp:
        try:
            with rasterio.open(vrt) as src:
                rasterio.shutil.copy(src, tmp, driver="GTiff", **CREATION_OPTIONS)
        except GDAL_ERRORS as exc:
            raise UnprocessableError(
                f"{source.name}: {gdal_message(exc)}", file=source.name
            ) from exc


def compress_layer(work_dir: Path, rel_path: str, report: JobReporter) -> dict[str, Any]:
    """Compress every raster of a layer, one metadata line per file.

    Returns:
        ``folder`` (where the copies are, relative to the raster root) and ``files``: each
        file's ``name``, ``size`` before and ``compressed`` after, ``ratio``, ``ms``, ``err``.

    Raises:
        NotFoundError: no raster at the path.
        UnprocessableError: some files could not be compressed (the others are).
    """
    where = locate_layer(work_dir, rel_path)
    files = layer_files(raster_root(work_dir), where.rel_path)
    out_dir = (where.source if where.source.is_dir() else where.source.parent) / COMPRESS_DIR
    report.line(f"Start compression: {len(files)} file(s) -> {out_dir.name}/")
    results = []
    for i, path in enumerate(files, start=1):
        t0 = time.monotonic()
        target = out_dir / compressed_name(path)
        before = os.stat(path).st_size
        try:
            compress_file(path, target)
        except MapsvcError as exc:
            results.append(
                {
                    "name": path.name,
                    "size": before,
                    "compressed": None,
                    "ratio": None,
                    "ms": int((time.monotonic() - t0) * 1000),
                    "err": exc.message,
                }
            )
            report.line(f"{path.name}: failed: {exc.message}", progress=i / len(files))
            continue
        after = os.stat(target).st_size
        ms = int((time.monotonic() - t0) * 1000)
        results.append(
            {
                "name": path.name,
                "size": before,
                "compressed": after,
                "ratio": round(after / before, 4),
                "ms": ms,
                "err": "",
            }
        )
        report.line(
            f"{path.name}: {before} -> {after} bytes, ratio {after / before:.3f}, {ms} ms",
            progress=i / len(files),
        )
    failed = [r for r in results if r["err"]]
    if failed:
        raise UnprocessableError(
            f"{len(failed)} of {len(files)} file(s) could not be compressed: {failed[0]['err']}",
            files=failed,
        )
    folder = out_dir.relative_to(raster_root(work_dir).resolve()).as_posix()
    return {"folder": folder, "files": results}
