"""The read-only raster endpoints' answers (listing, stat, info), cached in Redis.

Each cache key holds the store, and the sizes and versions (mtimes on a file system, ETags in a
bucket) of the files the answer depends on, so a changed file is never answered from a stale
entry; ``refresh`` (``nocache=1``) recomputes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from shared.cache import cached_json
from shared.errors import InvalidInputError, MapsvcError
from shared.raster.catalog import is_raster, layer_files, list_folder, listing_signature
from shared.raster.info import raster_info
from shared.raster.layer import locate_layer, mosaic_source
from shared.raster.paths import decode_id, file_of_layer, raster_root
from shared.raster.stat import raster_stat
from shared.raster.store import FileRasterStore, RasterStore
from shared.workdir import WorkDir

__all__ = ["ResultCache", "raster_info_of", "raster_listing", "raster_stat_of"]


@dataclass(frozen=True)
class ResultCache:
    """Where answers are cached (Redis), for how long, in what budget; ``refresh`` recomputes."""

    client: redis.Redis
    ttl_s: int
    max_bytes: int
    refresh: bool = False

    def get(
        self, kind: str, depends_on: Any, compute: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """The answer of kind ``kind`` for ``depends_on``: cached, or computed and cached."""
        return dict(
            cached_json(
                self.client,
                kind,
                depends_on,
                compute,
                ttl_s=self.ttl_s,
                max_bytes=self.max_bytes,
                refresh=self.refresh,
            )
        )


def _ms(t0: float) -> int:
    return int((time.monotonic() - t0) * 1000)


def _store(work_dir: Path, rasters: RasterStore | None) -> RasterStore:
    return rasters or FileRasterStore(raster_root(work_dir))


def raster_listing(
    cache: ResultCache, work_dir: Path, folder: str, *, rasters: RasterStore | None = None
) -> dict[str, Any]:
    """The raster listing object (spec 2.1) of ``folder``.

    ``rasters`` is the raster store (default: the folder ``<workDir>/map/raster``), as for every
    function here.
    """
    t0 = time.monotonic()
    rasters, mapnik_dir = _store(work_dir, rasters), WorkDir(work_dir).mapnik
    depends_on = listing_signature(rasters, mapnik_dir, folder)
    listing = cache.get("raster-list", depends_on, lambda: list_folder(rasters, mapnik_dir, folder))
    return {"time": _ms(t0), **listing}


def raster_stat_of(
    cache: ResultCache, work_dir: Path, raster_id: str, *, rasters: RasterStore | None = None
) -> dict[str, Any]:
    """Raster statistics (spec 2.3) of the raster with id ``raster_id``."""
    t0 = time.monotonic()
    rasters, rel = _store(work_dir, rasters), decode_id(raster_id)
    item = rasters.item(rel)
    files = layer_files(rasters, rel)
    depends_on = [rasters.describe(), rel, [f.signature for f in (item, *files)]]
    stat = cache.get("raster-stat", depends_on, lambda: raster_stat(rasters, rel))
    return {"time": _ms(t0), **stat}


def raster_info_of(
    cache: ResultCache,
    work_dir: Path,
    raster_id: str,
    file: str | None,
    *,
    rasters: RasterStore | None = None,
) -> dict[str, Any]:
    """Raster metadata (spec 2.4) of a layer's raster: ``file``, the layer's file, or its VRT.

    Args:
        cache: the results cache.
        work_dir: the service's work dir.
        raster_id: the layer id.
        file: one of the layer's raster files, relative to the raster root (``file=``), or None.
        rasters: the raster store (default: the folder ``<workDir>/map/raster``).

    Raises:
        InvalidInputError: bad id, or ``file`` outside the raster root or not a raster.
        NotFoundError: the layer or the file does not exist, or ``file`` is not the layer's.
        UnavailableError: the object storage cannot be reached.
    """
    rasters, rel = _store(work_dir, rasters), decode_id(raster_id)
    file = file_of_layer(rel, file) if file else None
    where = locate_layer(work_dir, rel, rasters=rasters)
    files = layer_files(rasters, where.rel_path)
    if file:
        item = rasters.item(file)
        if not is_raster(rasters, item):
            raise InvalidInputError(f"{file!r} is not a GeoTIFF or VRT", file=file)
        files = [item]
    shown = _Shown(rasters.gdal_root, raster_root(work_dir).resolve())

    def compute() -> dict[str, Any]:
        one = file or not where.is_dir
        source = files[0].gdal_path if one else str(mosaic_source(where, files))
        try:
            return shown.info(raster_info(source, rasters.file_size))
        except MapsvcError as exc:
            # GDAL's message names the file by its server path; show it as the API does
            for prefix in (rasters.gdal_root, str(work_dir.resolve())):
                exc.message = exc.message.replace(f"{prefix}/", "")
            exc.detail = {"path": shown.path(source)}
            raise

    depends_on = [rasters.describe(), where.rel_path, file, [f.signature for f in files]]
    return cache.get("raster-info", depends_on, compute)


@dataclass(frozen=True)
class _Shown:
    """Paths as gdalinfo prints them when run in the raster root: no server path is shown.

    A file of the store is named by its path in the store; any other local file (a mosaic VRT
    in the derived folder) relative to the local raster folder (``../derived/…``).
    """

    store_root: str
    local_root: Path

    def path(self, path: str) -> str:
        if path.startswith(f"{self.store_root}/"):
            return path[len(self.store_root) + 1 :]
        return os.path.relpath(path, self.local_root) if os.path.isabs(path) else path

    def info(self, info: dict[str, Any]) -> dict[str, Any]:
        info["description"] = self.path(info["description"])
        if "files" in info:
            info["files"] = [self.path(f) for f in info["files"]]
        return info
