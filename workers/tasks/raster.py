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
def configure(report: JobReporter, **params: Any) -> dict[str, Any]:
    """Build the map configuration of a raster layer (spec 4.4): a
    :class:`~shared.job_messages.RasterConfig`."""
    job = RASTER_CONFIG.read(params)
    with tile_stores(settings) as stores:  # a rebuilt layer's tiles are dropped from each
        return configure_layer(
            settings.work_dir,
            job.path,
            report,
            lang=job.lang,
            url_prefix=job.url_prefix,
            refresh=job.refresh,
            stores=stores.all(),
            resampling=LayerResampling(job.resampling) if job.resampling else None,
            rendering=None if job.rendering is None else rendering_from_json(job.rendering),
            rasters=_rasters(),
        )


@app.task(base=JobTask, name=RASTER_COMPRESS.task)
def compress(report: JobReporter, **params: Any) -> dict[str, Any]:
    """Compress the rasters of a layer into ``commpress`` (spec 4.3), in the layer's store."""
    job = RASTER_COMPRESS.read(params)
    return compress_layer(settings.work_dir, job.path, report, rasters=_rasters())
