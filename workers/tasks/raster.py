"""Raster jobs: layer configuration and compression."""

from __future__ import annotations

import functools
import os
from typing import Any

from shared.jobs import JobReporter
from shared.queues import RASTER_COMPRESS, RASTER_CONFIG
from shared.raster.compress import compress_layer
from shared.raster.layer import configure_layer
from shared.raster.rendering import rendering_from_json
from shared.raster.resampling import LayerResampling
from shared.raster.store import RasterStore, raster_store, set_gdal_environment
from shared.tiles.stores import tile_stores
from workers._job import JobTask
from workers.celery_app import app, settings

# GDAL reads a raster bucket with the AWS_* options of the environment: set when the worker
# loads its tasks, before any process of it opens a raster
set_gdal_environment(settings, os.environ)


@functools.cache
def _rasters() -> RasterStore:
    # one per worker process: a bucket's store holds a client with its connection pool
    return raster_store(settings)


@app.task(base=JobTask, name=RASTER_CONFIG.task)
def configure(
    report: JobReporter,
    path: str,
    lang: str,
    url_prefix: str,
    refresh: bool,
    resampling: str | None = None,
    rendering: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build the map configuration of a raster layer (spec 4.4), drawn with ``resampling`` and
    ``rendering`` (TiTiler's parameters as JSON; None: as it was configured last); its tiles
    under ``url_prefix``."""
    with tile_stores(settings) as stores:  # a rebuilt layer's tiles are dropped from each
        return configure_layer(
            settings.work_dir,
            path,
            report,
            lang=lang,
            url_prefix=url_prefix,
            refresh=refresh,
            stores=stores.all(),
            resampling=LayerResampling(resampling) if resampling else None,
            rendering=rendering_from_json(rendering) if rendering is not None else None,
            rasters=_rasters(),
        )


@app.task(base=JobTask, name=RASTER_COMPRESS.task)
def compress(report: JobReporter, path: str) -> dict[str, Any]:
    """Compress the rasters of a layer into ``commpress`` (spec 4.3), in the layer's store."""
    return compress_layer(settings.work_dir, path, report, rasters=_rasters())
