"""The read-only raster endpoints' answers (listing, stat, info), cached in Redis.

Each cache key holds the sizes and mtimes of the files the answer depends on, so a changed
file is never answered from a stale entry; ``refresh`` (``nocache=1``) recomputes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from shared.cache import cached_json, file_signature
from shared.errors import InvalidInputError, MapsvcError
from shared.raster.catalog import layer_files, list_folder, listing_signature
from shared.raster.info import raster_info
from shared.raster.layer import locate_layer, mosaic_source
from shared.raster.paths import decode_id, is_raster_file, raster_root, resolve
from shared.raster.stat import raster_stat
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


def raster_listing(cache: ResultCache, work_dir: Path, folder: str) -> dict[str, Any]:
    """The raster listing object (spec 2.1) of ``folder``."""
    t0 = time.monotonic()
    root, mapnik_dir = raster_root(work_dir), WorkDir(work_dir).mapnik
    depends_on = listing_signature(root, mapnik_dir, folder)
    listing = cache.get("raster-list", depends_on, lambda: list_folder(root, mapnik_dir, folder))
    return {"time": _ms(t0), **listing}


def raster_stat_of(cache: ResultCache, work_dir: Path, raster_id: str) -> dict[str, Any]:
    """Raster statistics (spec 2.3) of the raster with id ``raster_id``."""
    t0 = time.monotonic()
    root, rel = raster_root(work_dir), decode_id(raster_id)
    files = layer_files(root, rel)
    depends_on = [rel, file_signature([resolve(root, rel), *files])]
    stat = cache.get("raster-stat", depends_on, lambda: raster_stat(root, rel))
    return {"time": _ms(t0), **stat}


def raster_info_of(
    cache: ResultCache, work_dir: Path, raster_id: str, file: str | None
) -> dict[str, Any]:
    """Raster metadata (spec 2.4) of a layer's raster: ``file``, the layer's file, or its VRT.

    Args:
        cache: the results cache.
        work_dir: the service's work dir.
        raster_id: the layer id.
        file: a raster file relative to the raster root (``file=``), or None.

    Raises:
        InvalidInputError: bad id, or ``file`` outside the raster root or not a raster.
        NotFoundError: the layer or the file does not exist.
    """
    root = raster_root(work_dir)
    where = locate_layer(work_dir, decode_id(raster_id))
    files = layer_files(root, where.rel_path)
    if file:
        path = resolve(root, file)
        if not is_raster_file(path):
            raise InvalidInputError(f"{file!r} is not a GeoTIFF or VRT", file=file)
        files = [path]

    def compute() -> dict[str, Any]:
        source = files[0] if file or where.source.is_file() else mosaic_source(where, files)
        try:
            return _relative_paths(raster_info(source), root)
        except MapsvcError as exc:
            # GDAL's message names the file by its server path; show it as the API does
            for prefix in (root.resolve(), work_dir.resolve()):
                exc.message = exc.message.replace(f"{prefix}/", "")
            exc.detail = {"path": os.path.relpath(source, root.resolve())}
            raise

    return cache.get("raster-info", [where.rel_path, file, file_signature(files)], compute)


def _relative_paths(info: dict[str, Any], root: Path) -> dict[str, Any]:
    # Paths as gdalinfo prints them when run in the raster root: no server path is shown.
    real_root = root.resolve()

    def rel(path: str) -> str:
        return os.path.relpath(path, real_root) if os.path.isabs(path) else path

    info["description"] = rel(info["description"])
    if "files" in info:
        info["files"] = [rel(f) for f in info["files"]]
    return info
