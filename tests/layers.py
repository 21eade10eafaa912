"""Raster layers in tests: configured in-process, their tile URLs, stored tiles, tile pixels."""

from __future__ import annotations

import shutil
import uuid
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import rasterio
import redis
from affine import Affine
from rasterio.errors import NotGeoreferencedWarning
from rasterio.io import MemoryFile
from rasterio.warp import Resampling, reproject

from shared.base.grid import TileAddress
from shared.jobs import JobReporter, JobStore
from shared.raster.layer import configure_layer
from shared.raster.paths import encode_id
from shared.settings import Settings
from shared.tiles.store import FileTileStore

__all__ = [
    "MOSAIC_ID",
    "WORLD",
    "WORLD_ID",
    "RGB",
    "RGB_ID",
    "configure",
    "own_layer",
    "configuration",
    "decode",
    "reference",
    "stored_tiles",
    "tile_url",
]

#: the Landsat scene of the demo rasters, and the folder of its four quarters
RGB = "single/RGB.byte.tif"
RGB_ID = encode_id(RGB)
MOSAIC_ID = encode_id("bahamas-tiles")
#: a raster of the whole world, in EPSG:4326
WORLD = "single/world.rgb.tif"
WORLD_ID = encode_id(WORLD)


def configure(settings: Settings, rdb: redis.Redis, rel: str) -> str:
    """Configure a layer in-process (the job's own function, without a worker): its id."""
    configuration(settings, rdb, rel)
    return encode_id(rel)


def own_layer(settings: Settings, rdb: redis.Redis, src: str, folder: str, name: str) -> str:
    """A layer of its own, configured: a copy of raster ``src`` as ``<folder>/<name>`` (so that
    no other test cached its tiles); its id."""
    root = settings.dirs.raster
    (root / folder).mkdir(exist_ok=True)
    shutil.copyfile(root / src, root / folder / name)
    return configure(settings, rdb, f"{folder}/{name}")


def configuration(
    settings: Settings, rdb: redis.Redis, rel: str, lang: str = "en", url_prefix: str = "/api-user"
) -> dict[str, Any]:
    """Configure a layer in-process, its URLs in ``lang`` under ``url_prefix``: the result."""
    store = JobStore(rdb, settings)
    job_id = str(uuid.uuid4())
    store.create(job_id, "test", {})
    return configure_in_process(
        settings, rel, JobReporter(store, job_id), lang=lang, url_prefix=url_prefix
    )


def configure_in_process(
    settings: Settings,
    rel: str,
    report: JobReporter,
    *,
    refresh: bool = False,
    lang: str = "en",
    url_prefix: str = "/api-user",
) -> dict[str, Any]:
    """Configure the raster ``rel`` as a layer in this process, reporting to ``report``, the
    work dir's tiles dropped when it changes: the result."""
    return configure_layer(
        settings.work_dir,
        rel,
        report,
        lang=lang,
        url_prefix=url_prefix,
        refresh=refresh,
        stores=[FileTileStore(settings.dirs.rtile)],
    )


def decode(image: bytes) -> np.ndarray:
    """The pixels of a PNG, WebP or JPEG image (bands, rows, columns), decoded by GDAL."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)  # an image has no georeference
        with MemoryFile(image) as mem, mem.open() as ds:
            pixels: np.ndarray = ds.read()
    return pixels


def reference(src: Path, tile: TileAddress, size: int = 256) -> np.ndarray:
    """The tile's area read straight from the GeoTIFF, warped to ``size`` pixels by rasterio."""
    b = tile.bounds_3857()
    transform = Affine((b[2] - b[0]) / size, 0, b[0], 0, -(b[3] - b[1]) / size, b[3])
    out = np.zeros((3, size, size), np.uint8)
    with rasterio.open(src) as ds:
        for i in range(3):
            reproject(
                rasterio.band(ds, i + 1),
                out[i],
                dst_transform=transform,
                dst_crs="EPSG:3857",
                resampling=Resampling.bilinear,
                src_nodata=0,
                dst_nodata=0,
            )
    return out


def tile_url(style: str, z: int, x: int, y: int, query: str = "", suffix: str = ".png") -> str:
    """The URL of a tile in language ``en``; ``suffix`` names its variant (``@2x.webp``, …)."""
    return f"/api-user/rtile/{style}/en/{z}/{x}/{y}{suffix}{query}"


def stored_tiles(settings: Settings, style: str) -> set[tuple[int, int, int]]:
    """The ``(z, x, y)`` of the PNG tiles of ``style`` in the file cache (language ``en``)."""
    root = settings.dirs.rtile / style / "en"
    return {
        tuple(int(p) for p in path.relative_to(root).with_suffix("").parts)  # type: ignore[misc]
        for path in root.rglob("*.png")
        if "@" not in path.name  # not the @2x tiles
    }
