"""A pre-tiling run (spec 4.2) as worker processes drive it: start, send chunks, render, end.

A run is three kinds of step, each a task of its own: the start plans the run and takes the
layer's lock; the sender sends a batch of chunks and then queues its next step behind them (so
the queue holds about two batches of a run at a time, whatever the plan); each chunk renders
its tiles and adds its counts. The chunk that completes the count ends the job (summary, or
what went wrong, or its cancellation) and frees the layer. How a step is sent is the caller's
(a Celery task, say): the steps take it as callables.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from shared.errors import ConflictError, JobCancelledError, MapsvcError, UnprocessableError
from shared.jobs import Continued, JobReporter, JobStore
from shared.tiles.coverage import Coverage
from shared.tiles.encoding import DEFAULT_ENCODING, Codec, Encoding
from shared.tiles.formats import PNG_TILE, TileVariant
from shared.tiles.grid import TileAddress
from shared.tiles.metatile import DEFAULT_METATILING, Metatiling, metatiles
from shared.tiles.png import Rendered
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
from shared.tiles.store import TileStore, tile_key
from shared.tiles.stores import TileStores
from shared.tiles.styles import read_style

__all__ = ["PretileJob", "PretileRunner", "SendChunk", "SendStep"]

log = logging.getLogger(__name__)

#: starts of a chunk whose worker process died, before the chunk is given up
_CHUNK_ATTEMPTS = 2
#: chunks a run's sender sends before it queues its next step behind them
_SEND_BATCH = 256

#: queues the sender's step: the run's coverage (:meth:`Coverage.to_json`) and plan, the first
#: chunk to send, tiles sent
SendStep = Callable[[dict[str, Any], dict[str, Any], int, int], None]
#: queues the rendering of one chunk
SendChunk = Callable[[Chunk], None]


def _place(chunk: Chunk) -> str:
    return f"zoom {chunk.z} chunk {chunk.x0},{chunk.y0}"


@dataclass(frozen=True)
class PretileJob:
    """What every step of a run is told: the job, and the tiles it makes."""

    job_id: str
    style: str
    lang: str
    refresh: bool
    s3: bool
    variant: TileVariant = PNG_TILE


class PretileRunner:
    """The steps of pre-tiling runs, in one worker process.

    Args:
        store: the job store.
        renderer: renders the tiles (it keeps its loaded maps from chunk to chunk).
        stores: the tile caches.
        max_tiles: the most tiles of one run (``MAPSVC_PRETILE_MAX_TILES``).
        lock_ttl_s: how long a layer's lock lasts unless the run refreshes it.
        encoding: how tiles of each format are encoded (``MAPSVC_JPEG_QUALITY``, …).
        metatiling: how chunks are drawn (``MAPSVC_METATILE_*``).
    """

    def __init__(
        self,
        store: JobStore,
        renderer: TileRenderer,
        stores: TileStores,
        *,
        max_tiles: int,
        lock_ttl_s: int,
        encoding: Encoding = DEFAULT_ENCODING,
        metatiling: Metatiling = DEFAULT_METATILING,
    ) -> None:
        self.store = store
        self.renderer = renderer
        self.stores = stores
        self.max_tiles = max_tiles
        self.lock_ttl_s = lock_ttl_s
        self.encoding = encoding
        self.metatiling = metatiling

    def _counters(self, job_id: str) -> PretileCounters:
        return PretileCounters(self.store.client, job_id, self.store.ttl_s)

    def _lock(self, style: str) -> PretileLock:
        # the API takes it for the job; each step of the sender keeps it
        return PretileLock(self.store, style, self.lock_ttl_s)

    def start(
        self,
        report: JobReporter,
        job: PretileJob,
        minzoom: int,
        maxzoom: int,
        send: SendStep,
        coverage: dict[str, Any] | None = None,
    ) -> Continued | dict[str, Any]:
        """Plan the run and send its first sender step; the last chunk ends the job.

        ``coverage`` (:meth:`Coverage.to_json`) is the area tiled; None: the layer's footprint.

        Returns:
            What the job continues with, or the summary of a run without tiles.

        Raises:
            ConflictError: another job is pre-tiling the layer.
            UnprocessableError: the plan is above the ceiling.
            UnavailableError: the run's tile cache is not configured.
        """
        style = job.style
        try:
            if coverage is None:
                area = Coverage.box(read_style(self.renderer.mapnik_dir, style).footprint)
            else:
                area = Coverage.from_json(coverage)
            self.stores.pick(job.s3)  # a store that is not configured fails here, not per chunk
            plan = plan_pretile(area, minzoom, maxzoom, ceiling=self.max_tiles)
            # the API checked both first; these stop a job sent around it
            check_ceiling(plan)
            running = self._lock(style).acquire(job.job_id)
            if running not in (None, job.job_id):
                raise ConflictError(
                    f"layer {style} is being pre-tiled by job {running}", job_id=running
                )
            report.line(
                f"Pretile {style}: zooms {minzoom}-{maxzoom - 1}, {plan['total']} tiles"
                + ("" if job.variant == PNG_TILE else f" as {job.variant.name}")
            )
            for entry in plan["zooms"]:
                state = "tiled" if entry["tiled"] else "cut by the cap"
                report.line(f"Zoom {entry['zoom']}: {entry['tiles']} tiles, {state}")
            self._counters(job.job_id).start(plan)
            count = count_chunks(area, plan)
            if not count:
                self._lock(style).release(job.job_id)
                return self._summary(job.job_id)
            report.line(
                f"Chunks: {count} of up to {CHUNK * CHUNK} tiles, over every worker process"
            )
            send(area.to_json(), plan, 0, 0)
        except Exception:
            self._lock(style).release(job.job_id)
            raise
        return Continued({"chunks": count, "plan": plan})

    def send(
        self,
        job: PretileJob,
        coverage: dict[str, Any] | list[float],
        plan: dict[str, Any],
        start: int,
        sent_tiles: int,
        *,
        send_chunk: SendChunk,
        send_next: SendStep,
    ) -> None:
        """Send the run's next chunks from the ``start``-th, then queue the next step behind them.

        ``coverage`` is the run's (:meth:`Coverage.to_json`; a step sent before coverages
        existed has the layer's footprint). A cancelled run sends nothing more: the chunks
        never sent count as cancelled.
        """
        job_id = job.job_id
        record = self.store.get(job_id)
        if record is None or record.outcome is not None:
            return  # the job has ended (a watchdog, say): nothing more to do
        self._lock(job.style).refresh(job_id)
        if record.cancel_requested:
            # the chunks never sent count as cancelled, so that the count completes
            if self._counters(job_id).add_rest(plan["total"] - sent_tiles):
                self._finish(JobReporter.of_running_job(self.store, job_id), job)
            return
        area = Coverage.from_json(coverage)
        pending = chunks(area, plan, start)
        batch = list(itertools.islice(pending, _SEND_BATCH))
        for chunk in batch:
            send_chunk(chunk)
        if next(pending, None) is not None:
            sent_tiles += sum(c.size for c in batch)
            send_next(area.to_json(), plan, start + len(batch), sent_tiles)

    def render(self, job: PretileJob, chunk: Chunk, worker: str = "") -> None:
        """Render the tiles of one chunk not cached yet (all with ``refresh``); count them.

        ``worker`` names the worker doing it (its Celery name): the summary says what each did.
        """
        job_id = job.job_id
        store, counters = self.stores.pick(job.s3), self._counters(job_id)
        report = JobReporter.of_running_job(self.store, job_id)
        counts = {"rendered": 0, "skipped": 0, "empty": 0, "cancelled": 0}
        error = None
        if self.store.cancel_requested(job_id):
            counts["cancelled"] = chunk.size
        else:
            attempts = counters.attempt(chunk)
            if attempts == 0:
                return  # the run's counters expired long ago: nothing is left to count into
            if attempts > _CHUNK_ATTEMPTS:
                error = f"{_place(chunk)}: its worker process died every time"
            else:
                error = self._render_tiles(chunk, job, store, counts)
        last = counters.add(chunk, counts, error, worker)
        if not counts["cancelled"]:
            text, progress = counters.progress_line(chunk.z)
            with contextlib.suppress(JobCancelledError):  # the chunks left see the flag too
                report.line(text, progress=progress)
        if last:
            self._finish(report, job)

    def _render_tiles(
        self, chunk: Chunk, job: PretileJob, store: TileStore, counts: dict[str, int]
    ) -> str | None:
        """Render the chunk's tiles into ``counts``; the error that stopped it, if one did.

        The tiles not cached yet (all of them with ``refresh``) are drawn as metatiles: the
        chunk's block as one image (or the blocks of the layer's metatile side in it), cut into
        the tiles the chunk makes; a block holds only those (their bounding box).

        Each tile is stored by a writer thread while the next one is cut or drawn: creating a file
        waits on the file system (measured on the project machine: 0.7 ms a tile alone, 1.5 ms
        with a second process writing: a tenth to a fifth of a tile's render), and that wait need
        not hold the rendering up. A tile counts once it is stored; the chunk ends when its last
        write has.
        """
        variant = job.variant
        codec = self.encoding.codec(variant.format)
        writes: list[tuple[Future[str], bool]] = []
        failed = threading.Event()  # a write failed: the rest of the chunk is not rendered
        error: BaseException | None = None

        def put(key: str, data: bytes) -> str:
            try:
                return store.put(key, data)
            except BaseException:
                failed.set()
                raise

        with ThreadPoolExecutor(1, thread_name_prefix="pretile-store") as writer:
            try:
                todo = []
                for tile in chunk.tiles():
                    if not job.refresh and store.exists(
                        tile_key(job.style, job.lang, tile, variant)
                    ):
                        counts["skipped"] += 1
                    else:
                        todo.append(tile)
                for tile, rendered in self._draw(job, todo, codec):
                    key = tile_key(job.style, job.lang, tile, variant)
                    writes.append((writer.submit(put, key, rendered.data), rendered.empty))
                    if failed.is_set():
                        break
            except Exception as exc:  # noqa: BLE001 - reported below, once the writes are done
                error = exc
        # the writes are done (the executor waited): count what was stored
        for write, empty in writes:
            if write.exception() is None:
                counts["rendered"] += 1
                counts["empty"] += empty
            elif error is None:
                error = write.exception()
        if error is None:
            return None
        if isinstance(error, MapsvcError):
            return f"{_place(chunk)}: {error.message}"
        if isinstance(error, OSError):  # the tile cache's disk: full, read-only, …
            reason = f"the tile cache could not be written: {error.strerror or error}"
            log.warning("pretile chunk %s: %s", chunk, reason)
            return f"{_place(chunk)}: {reason}"
        log.error("pretile chunk %s failed", chunk, exc_info=error)
        return f"{_place(chunk)}: internal error {type(error).__name__}"

    def _draw(
        self, job: PretileJob, tiles: list[TileAddress], codec: Codec
    ) -> Iterator[tuple[TileAddress, Rendered]]:
        """``tiles`` rendered, one at a time: by metatiles, or one by one when their side is 1."""
        if not tiles:
            return
        size = self.renderer.metatile_size(job.style, job.lang, self.metatiling.size)
        scale = job.variant.scale
        if size == 1:  # tile by tile, as a tile asked for on demand is drawn
            for tile in tiles:
                yield tile, self.renderer.render_tile(job.style, job.lang, tile, codec, scale)
            return
        for block, members in metatiles(tiles, size):
            yield from self.renderer.render_metatile(
                job.style, job.lang, block, members, codec, scale, self.metatiling.buffer
            )

    def _summary(self, job_id: str) -> dict[str, Any]:
        summary = self._counters(job_id).summary()
        return {k: v for k, v in summary.items() if k not in ("done", "first_error")}

    def _finish(self, report: JobReporter, job: PretileJob) -> None:
        """End a pre-tiling job once all its chunks are done, and free its layer."""
        try:
            self._end(report, job.job_id)
        finally:
            self._lock(job.style).release(job.job_id)

    def _end(self, report: JobReporter, job_id: str) -> None:
        """The job's summary, or what went wrong."""
        summary = self._counters(job_id).summary()
        if self.store.cancel_requested(job_id):
            report.fail(JobCancelledError("the job was cancelled"))
            return
        report.store.publish(
            job_id,
            f"Done: {summary['rendered']} rendered, {summary['skipped']} skipped (cached), "
            f"{summary['empty']} empty, in {summary['seconds']} s {report.elapsed_ms}ms",
        )
        if summary["first_error"]:
            report.fail(
                UnprocessableError(f"some tiles could not be made: {summary['first_error']}")
            )
            return
        report.succeed(self._summary(job_id))
