"""Tile jobs: pre-tiling fanned out in chunks over every worker process, the speed test, export."""

from __future__ import annotations

import functools
from typing import Any

from celery import Task

from shared.jobs import Continued, JobReporter
from shared.tiles.encoding import Encoding
from shared.tiles.export import ExportJob, export_folder, export_layer, export_name
from shared.tiles.formats import TileVariant
from shared.tiles.metatile import Metatiling
from shared.tiles.pretile import Chunk
from shared.tiles.pretile_run import PretileJob, PretileRunner
from shared.tiles.render import TileRenderer
from shared.tiles.speed import speed_test as run_speed_test
from shared.tiles.stores import TileStores, tile_stores
from workers._job import JobTask, job_store
from workers.celery_app import app, settings


@functools.cache
def _renderer() -> TileRenderer:
    # one per worker process, keeping its loaded maps from chunk to chunk
    return TileRenderer(settings.dirs.mapnik)


@functools.cache
def _stores() -> TileStores:
    # one per worker process: an S3 store holds a client with its connection pool
    return tile_stores(settings)


def _runner() -> PretileRunner:
    return PretileRunner(
        job_store(),
        _renderer(),
        _stores(),
        max_tiles=settings.tiles.pretile_max_tiles,
        lock_ttl_s=settings.jobs.time_limit_s,
        encoding=Encoding.from_settings(settings.tiles),
        metatiling=Metatiling.from_settings(settings.tiles),
    )


@app.task(base=JobTask, name="tiles.pretile")
def pretile(
    report: JobReporter,
    style: str,
    lang: str,
    minzoom: int,
    maxzoom: int,
    refresh: bool,
    s3: bool,
    variant: str = "png",
    coverage: dict[str, Any] | None = None,
) -> Continued | dict[str, Any]:
    """Plan the run and start sending its chunks; the last of them ends the job (spec 4.2).

    ``variant`` names the tiles' format and scale (``png``, ``webp@2x``, …); every step of the
    run is sent it (a step sent before it existed makes PNG tiles). ``coverage`` is the area
    tiled (``Coverage.to_json``; None: the layer's footprint).
    """
    job = PretileJob(report.job_id, style, lang, refresh, s3, TileVariant.from_name(variant))
    return _runner().start(
        report,
        job,
        minzoom,
        maxzoom,
        lambda area, plan, start, sent: send_chunks.delay(
            job.job_id, style, lang, area, plan, refresh, s3, start, sent, variant
        ),
        coverage,
    )


@app.task(name="tiles.send_chunks", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def send_chunks(
    job_id: str,
    style: str,
    lang: str,
    coverage: dict[str, Any] | list[float],
    plan: dict[str, Any],
    refresh: bool,
    s3: bool,
    start: int,
    sent_tiles: int,
    variant: str = "png",
) -> None:
    """Send the run's next chunks from the ``start``-th, then queue the next step behind them.

    Resent when its worker process dies: a chunk sent twice still counts once. ``coverage``
    is the run's (a step sent before coverages existed has the layer's bounds).
    """
    _runner().send(
        PretileJob(job_id, style, lang, refresh, s3, TileVariant.from_name(variant)),
        coverage,
        plan,
        start,
        sent_tiles,
        send_chunk=lambda c: render_chunk.delay(
            job_id, style, lang, c.z, c.x0, c.y0, c.x1, c.y1, refresh, s3, variant, c.mask
        ),
        send_next=lambda area, plan, start, sent: send_chunks.delay(
            job_id, style, lang, area, plan, refresh, s3, start, sent, variant
        ),
    )


@app.task(
    bind=True, name="tiles.chunk", acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def render_chunk(
    self: Task,
    job_id: str,
    style: str,
    lang: str,
    z: int,
    x0: int,
    y0: int,
    x1: int,
    y1: int,
    refresh: bool,
    s3: bool,
    variant: str = "png",
    mask: int | None = None,
) -> None:
    """Render the tiles of one chunk that are not cached yet (all of them with ``refresh``);
    ``mask``: the chunk's tiles to make (``Chunk.mask``; None: every one)."""
    job = PretileJob(job_id, style, lang, refresh, s3, TileVariant.from_name(variant))
    _runner().render(job, Chunk(z, x0, y0, x1, y1, mask), self.request.hostname or "")


@app.task(base=JobTask, name="tiles.speed_test")
def speed_test(report: JobReporter, style: str, lang: str) -> dict[str, Any]:
    """Render a fixed sample of tiles, cold and cached, and report the speeds (spec 4.7)."""
    return run_speed_test(_renderer(), _stores().pick(False), style, lang, report)


@app.task(base=JobTask, name="tiles.export")
def export(
    report: JobReporter,
    layer: str,
    vector: bool,
    archive: str,
    tile_format: str,
    bbox: list[float],
    minzoom: int,
    maxzoom: int,
    lang: str = "",
    url: str = "",
) -> dict[str, Any]:
    """Write a layer's tiles for a box and zooms into an MBTiles or PMTiles file (issue 25)."""
    job = ExportJob(layer, vector, archive, tile_format, bbox, minzoom, maxzoom, lang, url)
    path = export_folder(settings.dirs.exports, layer) / export_name(report.job_id, archive)
    return export_layer(
        settings, job, path, report, renderer=_renderer(), store=_stores().pick(False)
    )
