"""Tile jobs: pre-tiling fanned out in chunks over every worker process, and the speed test."""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any

from celery import group

from shared.errors import JobCancelledError, MapsvcError, UnprocessableError
from shared.jobs import Continued, JobReporter
from shared.tiles.pretile import CHUNK, Chunk, PretileCounters, chunks, plan_pretile
from shared.tiles.render import TileRenderer
from shared.tiles.speed import speed_test as run_speed_test
from shared.tiles.store import FileTileStore, TileStore, tile_key
from shared.tiles.stores import s3_store
from shared.tiles.styles import read_style
from workers._job import JobTask, job_store
from workers.celery_app import app, settings

log = logging.getLogger(__name__)

#: starts of a chunk whose worker process died, before the chunk is given up
_CHUNK_ATTEMPTS = 2


@functools.cache
def _renderer() -> TileRenderer:
    # one per worker process, keeping its loaded maps from chunk to chunk
    return TileRenderer(settings.work_dir / "map" / "mapnik")


@functools.cache
def _store(s3: bool) -> TileStore:
    # one per worker process: an S3 store holds a client with its connection pool
    if s3:
        return s3_store(settings)
    return FileTileStore(settings.work_dir / "map" / "rtile")


def _counters(job_id: str) -> PretileCounters:
    return PretileCounters(job_store().client, job_id, settings.events_ttl_s)


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
    """Plan the run and send its chunks; the last of them ends the job (spec 4.2)."""
    bounds = read_style(_renderer().mapnik_dir, style).bounds or [-180.0, -85.0, 180.0, 85.0]
    _store(s3)  # a store that is not configured fails the job here, not in every chunk
    plan = plan_pretile(bounds, minzoom, maxzoom)
    report.line(f"Pretile {style}: zooms {minzoom}-{maxzoom - 1}, {plan['total']} tiles")
    for entry in plan["zooms"]:
        state = "tiled" if entry["tiled"] else "cut by the cap"
        report.line(f"Zoom {entry['zoom']}: {entry['tiles']} tiles, {state}")
    _counters(report.job_id).start(plan)
    header = [
        render_chunk.s(report.job_id, style, lang, c.z, c.x0, c.y0, c.x1, c.y1, refresh, s3)
        for c in chunks(bounds, plan)
    ]
    if not header:
        return _summary(report.job_id)
    report.line(f"Chunks: {len(header)} of up to {CHUNK * CHUNK} tiles, over every worker process")
    group(header).apply_async()
    return Continued({"chunks": len(header), "plan": plan})


@app.task(name="tiles.chunk", acks_late=True, reject_on_worker_lost=True)
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
    elif counters.attempt(chunk) > _CHUNK_ATTEMPTS:
        error = f"zoom {z} chunk {x0},{y0}: its worker process died every time"
    else:
        error = _render_chunk(chunk, style, lang, store, refresh, counts)
    last = counters.add(chunk, counts, error)
    if not counts["cancelled"]:
        text, progress = counters.progress_line(z)
        with contextlib.suppress(JobCancelledError):  # the chunks left see the flag too
            report.line(text, progress=progress)
    if last:
        _finish(report, job_id)


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


def _finish(report: JobReporter, job_id: str) -> None:
    """End a pre-tiling job once all its chunks are done: its summary, or what went wrong."""
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
