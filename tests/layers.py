"""Raster layers in tests: configured in-process, their tile URLs, stored tiles, PNG pixels."""

from __future__ import annotations

import uuid
import warnings

import numpy as np
import redis
from rasterio.errors import NotGeoreferencedWarning
from rasterio.io import MemoryFile

from shared.jobs import JobReporter, JobStore
from shared.raster.layer import configure_layer
from shared.raster.paths import encode_id
from shared.settings import Settings

__all__ = ["MOSAIC_ID", "RGB", "RGB_ID", "configure", "decode", "stored_tiles", "tile_url"]

#: the Landsat scene of the shared rasters, and the folder of its four quarters
RGB = "single/RGB.byte.tif"
RGB_ID = encode_id(RGB)
MOSAIC_ID = encode_id("bahamas-tiles")


def configure(settings: Settings, rdb: redis.Redis, rel: str) -> str:
    """Configure a layer in-process (the job's own function, without a worker)."""
    store = JobStore(rdb, settings)
    job_id = str(uuid.uuid4())
    store.create(job_id, "test", {})
    configure_layer(
        settings.work_dir,
        rel,
        JobReporter(store, job_id),
        lang="en",
        url_prefix="/api-user",
        refresh=False,
    )
    return encode_id(rel)


def decode(png: bytes) -> np.ndarray:
    """The pixels of a PNG (bands, rows, columns)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)  # a PNG has no georeference
        with MemoryFile(png) as mem, mem.open() as ds:
            pixels: np.ndarray = ds.read()
    return pixels


def tile_url(style: str, z: int, x: int, y: int, query: str = "") -> str:
    return f"/api-user/rtile/{style}/en/{z}/{x}/{y}.png{query}"


def stored_tiles(settings: Settings, style: str) -> set[tuple[int, int, int]]:
    """The ``(z, x, y)`` of the tiles of ``style`` in the file cache (language ``en``)."""
    root = settings.dirs.rtile / style / "en"
    return {
        tuple(int(p) for p in path.relative_to(root).with_suffix("").parts)  # type: ignore[misc]
        for path in root.rglob("*.png")
    }
