"""Tile jobs: pre-tiling fanned out in chunks over every worker process, and the speed test."""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
from typing import Any

from shared.errors import ConflictError, JobCancelledError, MapsvcError, UnprocessableError
from shared.jobs import Continued, JobReporter
from shared.tiles.pretile import (
    CHUNK,
    Chunk,
    PretileCounters,
    PretileLock,
    check_ceiling,
    chunks,
    count_chunks,
    plan_pretile,
)
from shared.tiles.render import TileRenderer
from shared.tiles.speed import speed_test as run_speed_test
from shared.tiles.store import TileStore, tile_key
from shared.tiles.stores import TileStores, tile_stores
from shared.tiles.styles import read_style
from workers._job import JobTask, job_store
from workers.celery_app import app, settings

log = logging.getLogger(__name__)

#: starts of a chunk whose worker process died, before the chunk is given up
_CHUNK_ATTEMPTS = 2
#: chunks a run's sender sends before it queues its next step behind them: the queue holds
#: about two batches of a run at a time (and the sender a batch), whatever the plan
_SEND_BATCH = 256


@functools.cache
def _renderer() -> TileRenderer:
    # one per worker process, keeping its loaded maps from chunk to chunk
    return TileRenderer(settings.work_dir / "map" / "mapnik")


@functools.cache
def _stores() -> TileStores:
    # one per worker process: an S3 store holds a client with its connection pool
    return tile_stores(settings)


def _store(s3: bool) -> TileStore:
    return _stores().pick(s3)


def _counters(job_id: str) -> PretileCounters:
    return PretileCounters(job_store().client, job_id, settings.events_ttl_s)


def _lock(style: str) -> PretileLock:
    # the API takes it for the job; each step of the sender keeps it
    return PretileLock(job_store(), style, settings.job_time_limit_s)


@app.task(base=JobTask, name="tiles.pretile")
def pretile(
    report: JobReporter,
    style: str,
    lang: str,
    minzoom: int,
    maxzoom: int,
    refresh: bool,
    s3: bool,
) -> Continued | dict[str, Any]:
    """Plan the run and start sending its chunks; the last of them ends the job (spec 4.2)."""
    try:
        bounds = read_style(_renderer().mapnik_dir, style).bounds or [-180.0, -85.0, 180.0, 85.0]
        _store(s3)  # a store that is not configured fails the job here, not in every chunk
        plan = plan_pretile(bounds, minzoom, maxzoom, ceiling=settings.pretile_max_tiles)
        # the API checked both first; these stop a job sent around it
        check_ceiling(plan)
        running = _lock(style).acquire(report.job_id)
        if running not in (None, report.job_id):
            raise ConflictError(
                f"layer {style} is being pre-tiled by job {running}", job_id=running
            )
        report.line(f"Pretile {style}: zooms {minzoom}-{maxzoom - 1}, {plan['total']} tiles")
        for entry in plan["zooms"]:
            state = "tiled" if entry["tiled"] else "cut by the cap"
            report.line(f"Zoom {entry['zoom']}: {entry['tiles']} tiles, {state}")
        _counters(report.job_id).start(plan)
        count = count_chunks(bounds, plan)
        if not count:
            _lock(style).release(report.job_id)
            return _summary(report.job_id)
        report.line(f"Chunks: {count} of up to {CHUNK * CHUNK} tiles, over every worker process")
        send_chunks.delay(report.job_id, style, lang, bounds, plan, refresh, s3, 0, 0)
    except Exception:
        _lock(style).release(report.job_id)
        raise
    return Continued({"chunks": count, "plan": plan})


@app.task(name="tiles.send_chunks", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def send_chunks(
    job_id: str,
    style: str,
    lang: str,
    bounds: list[float],
    plan: dict[str, Any],
    refresh: bool,
    s3: bool,
    start: int,
    sent_tiles: int,
) -> None:
    """Send the run's next chunks from the ``start``-th, then queue the next step behind them.

    Resent when its worker process dies: a chunk sent twice still counts once.
    """
    record = job_store().get(job_id)
    if record is None or record.outcome is not None:
        return  # the job has ended (a watchdog, say): nothing more to do
    _lock(style).refresh(job_id)
    if record.cancel_requested:
        # the chunks never sent count as cancelled, so that the count completes
        if _counters(job_id).add_rest(plan["total"] - sent_tiles):
            _finish(JobReporter.of_running_job(job_store(), job_id), style, job_id)
        return
    pending = chunks(bounds, plan, start)
    batch = list(itertools.islice(pending, _SEND_BATCH))
    for c in batch:
        render_chunk.delay(job_id, style, lang, c.z, c.x0, c.y0, c.x1, c.y1, refresh, s3)
    if next(pending, None) is not None:
        sent_tiles += sum(c.size for c in batch)
        send_chunks.delay(
            job_id, style, lang, bounds, plan, refresh, s3, start + len(batch), sent_tiles
        )


@app.task(name="tiles.chunk", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def render_chunk(
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
) -> None:
    """Render the tiles of one chunk that are not cached yet (all of them with ``refresh``)."""
    store, counters, chunk = _store(s3), _counters(job_id), Chunk(z, x0, y0, x1, y1)
    report = JobReporter.of_running_job(job_store(), job_id)
    counts = {"rendered": 0, "skipped": 0, "empty": 0, "cancelled": 0}
    error = None
    if job_store().cancel_requested(job_id):
        counts["cancelled"] = chunk.size
    else:
        attempts = counters.attempt(chunk)
        if attempts == 0:
            return  # the run's counters expired long ago: nothing is left to count into
        if attempts > _CHUNK_ATTEMPTS:
            error = f"zoom {z} chunk {x0},{y0}: its worker process died every time"
        else:
            error = _render_chunk(chunk, style, lang, store, refresh, counts)
    last = counters.add(chunk, counts, error)
    if not counts["cancelled"]:
        text, progress = counters.progress_line(z)
        with contextlib.suppress(JobCancelledError):  # the chunks left see the flag too
            report.line(text, progress=progress)
    if last:
        _finish(report, style, job_id)


def _render_chunk(
    chunk: Chunk, style: str, lang: str, store: TileStore, refresh: bool, counts: dict[str, int]
) -> str | None:
    """Render the chunk's tiles into ``counts``; the error that stopped it, if one did."""
    try:
        for tile in chunk.tiles():
            key = tile_key(style, lang, tile)
            if not refresh and store.exists(key):
                counts["skipped"] += 1
                continue
            rendered = _renderer().render_tile(style, lang, tile)
            store.put(key, rendered.png)
            counts["rendered"] += 1
            counts["empty"] += rendered.empty
    except MapsvcError as exc:
        return f"zoom {chunk.z} chunk {chunk.x0},{chunk.y0}: {exc.message}"
    except Exception as exc:  # noqa: BLE001 - a chunk never stops the run; the job reports it
        log.exception("pretile chunk %s failed", chunk)
        return f"zoom {chunk.z} chunk {chunk.x0},{chunk.y0}: internal error {type(exc).__name__}"
    return None


def _summary(job_id: str) -> dict[str, Any]:
    summary = _counters(job_id).summary()
    return {k: v for k, v in summary.items() if k not in ("done", "first_error")}


def _finish(report: JobReporter, style: str, job_id: str) -> None:
    """End a pre-tiling job once all its chunks are done, and free its layer."""
    try:
        _end(report, job_id)
    finally:
        _lock(style).release(job_id)


def _end(report: JobReporter, job_id: str) -> None:
    """The job's summary, or what went wrong."""
    summary = _counters(job_id).summary()
    if job_store().cancel_requested(job_id):
        report.fail(JobCancelledError("the job was cancelled"))
        return
    report.store.publish(
        job_id,
        f"Done: {summary['rendered']} rendered, {summary['skipped']} skipped (cached), "
        f"{summary['empty']} empty, in {summary['seconds']} s {report.elapsed_ms}ms",
    )
    if summary["first_error"]:
        report.fail(UnprocessableError(f"some tiles could not be made: {summary['first_error']}"))
        return
    report.succeed(_summary(job_id))


@app.task(base=JobTask, name="tiles.speed_test")
def speed_test(report: JobReporter, style: str, lang: str) -> dict[str, Any]:
    """Render a fixed sample of tiles, cold and cached, and report the speeds (spec 4.7)."""
    return run_speed_test(_renderer(), _store(False), style, lang, report)
