"""Tile jobs: pre-tiling fanned out in chunks over every worker process, the speed test, export."""

from __future__ import annotations

import functools
from typing import Any

from celery import Task

from shared.base.encoding import Encoding
from shared.base.formats import TileVariant
from shared.base.grid import TileAddress
from shared.job_messages import Sweep
from shared.jobs import Continued, JobReporter
from shared.queues import (
    CHUNK_TASK,
    EXPIRE,
    EXPORT,
    PRETILE,
    SEND_CHUNKS_TASK,
    SPEED_TEST,
    TRUNCATE,
)
from shared.seeding.export import export_folder, export_layer, export_name
from shared.seeding.export_s3 import ExportBucket
from shared.seeding.plan import Chunk
from shared.seeding.pretile import LayerLock
from shared.seeding.pretile_run import PretileJob, PretileRunner, SendChunk, SendStep
from shared.seeding.speed import speed_test as run_speed_test
from shared.seeding.truncate import run_sweep
from shared.tiles.metatile import Metatiling
from shared.tiles.render import TileRenderer
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
        max_runs=settings.tiles.seed_max_concurrent_runs,
        keep_free=settings.tiles.min_free_disk_bytes,
        max_failed=settings.tiles.seed_max_failed_tiles,
    )


def _job(
    job_id: str,
    style: str,
    lang: str,
    refresh: bool,
    s3: bool,
    variant: str,
    refresh_before: float | None,
    max_tiles_per_s: float | None = None,
) -> PretileJob:
    """What a step of a run is told, from its task's arguments (``variant``: the tiles' name)."""
    variant_of = TileVariant.from_name(variant)
    return PretileJob(job_id, style, lang, refresh, s3, variant_of, refresh_before, max_tiles_per_s)


@app.task(base=JobTask, name=PRETILE.task)
def pretile(report: JobReporter, **params: Any) -> Continued | dict[str, Any]:
    """Plan the run (:class:`~shared.job_messages.Pretile`) and start sending its chunks; the
    last of them ends the job (spec 4.2). Every step of the run is sent its variant (a step
    sent before variants existed makes PNG tiles)."""
    run = PRETILE.read(params)
    job = _job(
        report.job_id,
        run.style,
        run.lang,
        run.refresh,
        run.s3,
        run.variant,
        run.refresh_before,
        run.max_tiles_per_s,
    )
    return _runner().start(
        report,
        job,
        run.minzoom,
        run.maxzoom,
        _send_step(job),
        run.coverage,
        resume_of=run.resume_of,
    )


def _send_step(job: PretileJob) -> SendStep:
    """Queues a sender step of the run (after ``later`` seconds)."""

    def send(
        area: dict[str, Any] | list[float],
        plan: dict[str, Any],
        start: int,
        sent: int,
        later: float,
    ) -> None:
        send_chunks.apply_async(
            (job.job_id, job.style, job.lang, area, plan, job.refresh, job.s3, start, sent),
            {
                "variant": job.variant.name,
                "refresh_before": job.refresh_before,
                "max_tiles_per_s": job.max_tiles_per_s,
            },
            countdown=later or None,
        )

    return send


def _send_chunk(job: PretileJob) -> SendChunk:
    """Queues the rendering of a chunk of the run (after ``later`` seconds)."""

    def send(c: Chunk, later: float) -> None:
        args = (job.job_id, job.style, job.lang, c.z, c.x0, c.y0, c.x1, c.y1, job.refresh, job.s3)
        kwargs: dict[str, Any] = {"variant": job.variant.name, "mask": c.mask}
        if job.refresh_before is not None:  # (a chunk sent before it existed has none)
            kwargs["refresh_before"] = job.refresh_before
        render_chunk.apply_async(args, kwargs, countdown=later or None)

    return send


@app.task(name=SEND_CHUNKS_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
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
    refresh_before: float | None = None,
    max_tiles_per_s: float | None = None,
) -> None:
    """Send the run's next chunks from the ``start``-th, then queue the next step behind them.

    Resent when its worker process dies: a chunk sent twice still counts once. ``coverage``
    is the run's (a step sent before coverages existed has the layer's bounds).
    """
    job = _job(job_id, style, lang, refresh, s3, variant, refresh_before, max_tiles_per_s)
    _runner().send(
        job,
        coverage,
        plan,
        start,
        sent_tiles,
        send_chunk=_send_chunk(job),
        send_next=_send_step(job),
    )


@app.task(
    bind=True, name=CHUNK_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True
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
    refresh_before: float | None = None,
) -> None:
    """Render the tiles of one chunk that are not cached yet (all of them with ``refresh``,
    those cached before ``refresh_before`` again); ``mask``: the chunk's tiles to make
    (``Chunk.mask``; None: every one). A chunk that fails is sent again, a bounded number of
    times."""
    job = _job(job_id, style, lang, refresh, s3, variant, refresh_before)
    chunk = Chunk(z, x0, y0, x1, y1, mask)
    _runner().render(job, chunk, self.request.hostname or "", retry=_send_chunk(job))


@app.task(base=JobTask, name=SPEED_TEST.task)
def speed_test(report: JobReporter, **params: Any) -> dict[str, Any]:
    """Render a fixed sample of tiles, cold and cached, and report the speeds (spec 4.7)."""
    job = SPEED_TEST.read(params)
    return run_speed_test(_renderer(), _stores().pick(False), job.style, job.lang, report)


@app.task(base=JobTask, name=EXPORT.task)
def export(report: JobReporter, **params: Any) -> dict[str, Any]:
    """Write a layer's tiles for a coverage and zooms into an MBTiles or PMTiles file, on the
    disk or (``s3``) in the bucket (issue 25)."""
    job = EXPORT.read(params)
    folder = export_folder(settings.dirs.exports, job.layer)
    path = folder / export_name(report.job_id, job.archive)
    stores = _stores()
    try:
        return export_layer(
            settings,
            job,
            path,
            report,
            renderer=_renderer(),
            store=stores.pick(False),
            bucket=None if stores.s3 is None else ExportBucket(stores.s3),
        )
    finally:  # the layer's next export may start (the API took the lock for this one)
        LayerLock(report.store, job.layer, 0, kind="export").release(report.job_id)


def _sweep(report: JobReporter, sweep: Sweep) -> dict[str, Any]:
    """Run a truncation or expiry; tiles drawn again tile by tile, as a tile asked for on
    demand is, at most ``MAPSVC_PRETILE_MAX_TILES`` of them."""
    encoding = Encoding.from_settings(settings.tiles)

    def render(style: str, lang: str, tile: TileAddress, variant: TileVariant) -> bytes:
        codec = encoding.codec(variant.format)
        return _renderer().render_tile(style, lang, tile, codec, variant.scale).data

    return run_sweep(
        sweep,
        report,
        stores=_stores(),
        client=job_store().client,
        render=render,
        rerender_max=settings.tiles.pretile_max_tiles,
    )


@app.task(base=JobTask, name=TRUNCATE.task)
def truncate(report: JobReporter, **params: Any) -> dict[str, Any]:
    """Remove a layer's cached tiles for a coverage, zooms, variants and languages (issue 25)."""
    return _sweep(report, TRUNCATE.read(params))


@app.task(base=JobTask, name=EXPIRE.task)
def expire(report: JobReporter, **params: Any) -> dict[str, Any]:
    """Remove (or draw again) a layer's cached tiles of an expiry list or polygon (issue 25)."""
    return _sweep(report, EXPIRE.read(params))
