"""Raster jobs: layer configuration and compression."""

from __future__ import annotations

from typing import Any

from shared.jobs import JobReporter
from shared.raster.compress import compress_layer
from shared.raster.layer import configure_layer
from shared.raster.resampling import DEFAULT_RESAMPLING, LayerResampling
from shared.tiles.stores import tile_stores
from workers._job import JobTask
from workers.celery_app import app, settings


@app.task(base=JobTask, name="raster.configure")
def configure(
    report: JobReporter,
    path: str,
    lang: str,
    url_prefix: str,
    refresh: bool,
    resampling: str = DEFAULT_RESAMPLING.value,
) -> dict[str, Any]:
    """Build the map configuration of a raster layer (spec 4.4), drawn with ``resampling``; its
    tiles under ``url_prefix``. (A job sent before the choice existed has no ``resampling``.)"""
    with tile_stores(settings) as stores:  # a rebuilt layer's tiles are dropped from each
        return configure_layer(
            settings.work_dir,
            path,
            report,
            lang=lang,
            url_prefix=url_prefix,
            refresh=refresh,
            stores=stores.all(),
            resampling=LayerResampling(resampling),
        )


@app.task(base=JobTask, name="raster.compress")
def compress(report: JobReporter, path: str) -> dict[str, Any]:
    """Compress the rasters of a layer into ``commpress`` (spec 4.3)."""
    return compress_layer(settings.work_dir, path, report)
