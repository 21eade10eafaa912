"""A pre-tiling run (spec 4.2) as worker processes drive it: start, send chunks, render, end.

A run is three kinds of step, each a task of its own: the start plans the run and takes the
layer's lock; the sender sends a batch of chunks and then queues its next step behind them (so
the queue holds about two batches of a run at a time, whatever the plan); each chunk renders
its tiles and adds its counts. The chunk that completes the count ends the job (summary, or
what went wrong, or its cancellation) and frees the layer (a cancelled run's layer was freed
by the cancel, at once). How a step is sent is the caller's (a Celery task, say): the steps
take it as callables.

A run waits for a place among ``MAPSVC_SEED_MAX_CONCURRENT_RUNS`` before its first chunk, paces
its chunks to ``max_tiles_per_s`` when it has one, sends a chunk that failed again (up to
:data:`CHUNK_ATTEMPTS` starts) and then lists its tiles as failed; a run with more failed tiles
than ``MAPSVC_SEED_MAX_FAILED_TILES`` ends. A resumed run (a new job continuing an interrupted
one) takes over its plan and the chunks it did, and makes only the others.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from shared.base.encoding import DEFAULT_ENCODING, Codec, Encoding
from shared.base.formats import PNG_TILE, TileVariant
from shared.base.grid import TileAddress
from shared.base.png import Rendered
from shared.disk import short_of_space
from shared.errors import (
    ConflictError,
    JobCancelledError,
    MapsvcError,
    UnavailableError,
    UnprocessableError,
)
from shared.jobs import Continued, JobReporter, JobStore
from shared.seeding.coverage import Coverage
from shared.seeding.plan import CHUNK, Chunk, check_ceiling, chunks, count_chunks, plan_pretile
from shared.seeding.pretile import LayerLock, PretileCounters, RunSlots
from shared.tiles.metatile import DEFAULT_METATILING, Metatiling, metatiles
from shared.tiles.render import TileRenderer
from shared.tiles.store import FileTileStore, TileStore, tile_key
from shared.tiles.stores import TileStores
from shared.tiles.styles import read_style

__all__ = ["CHUNK_ATTEMPTS", "PretileJob", "PretileRunner", "SendChunk", "SendStep"]

log = logging.getLogger(__name__)

#: starts of a chunk (its worker process died, or it failed and was sent again) before it is
#: given up and its tiles not made are listed as failed
CHUNK_ATTEMPTS = 3
#: seconds before a failed chunk is sent again, times its starts so far
_RETRY_S = 1.0
#: chunks a run's sender sends before it queues its next step behind them
_SEND_BATCH = 256
#: a paced run (``max_tiles_per_s``) sends about this many seconds of tiles a step
_PACE_S = 2.0
#: seconds between two looks of a run waiting for a place among the runs going
_WAIT_S = 2.0
#: most failed tiles a run's result lists beyond ``MAPSVC_SEED_MAX_FAILED_TILES``
_LISTED_BEYOND = CHUNK * CHUNK

#: queues the sender's step: the run's coverage (:meth:`Coverage.to_json`) and plan, the first
#: chunk to send, tiles sent (or done before), seconds to wait before it runs
SendStep = Callable[[dict[str, Any] | list[float], dict[str, Any], int, int, float], None]
#: queues the rendering of one chunk, after that many seconds
SendChunk = Callable[[Chunk, float], None]


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
    #: make again the cached tiles written before this time (POSIX seconds)
    refresh_before: float | None = None
    #: the pace of the run's chunks (None: as fast as the workers go)
    max_tiles_per_s: float | None = None


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
        max_runs: the most runs going at once (``MAPSVC_SEED_MAX_CONCURRENT_RUNS``; 0: any).
        max_failed: the failed tiles that end a run (``MAPSVC_SEED_MAX_FAILED_TILES``).
        keep_free: the bytes a run into the disk cache leaves free on its disk
            (``MAPSVC_MIN_FREE_DISK_BYTES``): short of them, it stops and fails.
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
        max_runs: int = 0,
        max_failed: int = 1000,
        keep_free: int = 0,
    ) -> None:
        self.store = store
        self.renderer = renderer
        self.stores = stores
        self.max_tiles = max_tiles
        self.lock_ttl_s = lock_ttl_s
        self.encoding = encoding
        self.metatiling = metatiling
        self.max_runs = max_runs
        self.max_failed = max_failed
        self.keep_free = keep_free

    def _counters(self, job_id: str) -> PretileCounters:
        return PretileCounters(self.store.client, job_id, self.store.ttl_s)

    def _lock(self, style: str) -> LayerLock:
        # the API takes it for the job; each step of the sender keeps it
        return LayerLock(self.store, style, self.lock_ttl_s)

    def _slots(self) -> RunSlots:
        return RunSlots(self.store, self.max_runs, self.lock_ttl_s)

    def start(
        self,
        report: JobReporter,
        job: PretileJob,
        minzoom: int,
        maxzoom: int,
        send: SendStep,
        coverage: dict[str, Any] | None = None,
        resume_of: str | None = None,
    ) -> Continued | dict[str, Any]:
        """Plan the run and send its first sender step; the last chunk ends the job.

        ``coverage`` (:meth:`Coverage.to_json`) is the area tiled; None: the layer's footprint.
        ``resume_of`` names the job this one continues: its plan, and its chunks done clean
        counted as done (the API ended that job and gave this one its lock).

        Returns:
            What the job continues with, or the summary of a run without tiles.

        Raises:
            ConflictError: another job is pre-tiling the layer.
            UnprocessableError: the plan is above the ceiling; the run resumed is gone.
            UnavailableError: the run's tile cache is not configured.
        """
        style = job.style
        counters = self._counters(job.job_id)
        try:
            if coverage is None:
                area = Coverage.box(read_style(self.renderer.mapnik_dir, style).footprint)
            else:
                area = Coverage.from_json(coverage)
            self.stores.pick(job.s3)  # a store that is not configured fails here, not per chunk
            running = self._lock(style).acquire(job.job_id)
            if self.store.cancel_requested(job.job_id):
                # cancelled meanwhile: the cancel freed the layer, perhaps before this took it
                # again (the flag is set first); give it back (below), a new run's stays
                raise JobCancelledError("the job was cancelled")
            if running not in (None, job.job_id):
                raise ConflictError(
                    f"layer {style} is being pre-tiled by job {running}", job_id=running
                )
            self._lock(style).remember(job.job_id)
            if resume_of is None:
                plan = plan_pretile(area, minzoom, maxzoom, ceiling=self.max_tiles)
                # the API checked both first; these stop a job sent around it
                check_ceiling(plan)
                counters.start(plan, {"coverage": area.to_json()})
                done = 0
            else:
                if not counters.exists():  # (a start run again has resumed already)
                    counters.resume(self._counters(resume_of))
                area = Coverage.from_json(counters.run()["coverage"])
                summary = counters.summary()
                plan, done = summary["plan"], int(summary["done"])
            report.line(
                f"Pretile {style}: zooms {minzoom}-{maxzoom - 1}, {plan['total']} tiles"
                + ("" if job.variant == PNG_TILE else f" as {job.variant.name}")
            )
            if resume_of is not None:
                report.line(f"Resumed job {resume_of}: {done} tiles done before, not made again")
            for entry in plan["zooms"]:
                state = "tiled" if entry["tiled"] else "cut by the cap"
                report.line(f"Zoom {entry['zoom']}: {entry['tiles']} tiles, {state}")
            count = count_chunks(area, plan)
            if not count or done >= plan["total"]:
                self._lock(style).release(job.job_id)
                return self._result(counters)
            report.line(
                f"Chunks: {count} of up to {CHUNK * CHUNK} tiles, over every worker process"
            )
            send(area.to_json(), plan, 0, done, 0.0)
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
        never sent count as cancelled. A run without a place among the runs going waits for
        one (the step looks again later); a chunk counted already (done before a resume) is
        not sent; a paced run sends about :data:`_PACE_S` seconds of tiles a step and queues
        the next step that much later.
        """
        job_id = job.job_id
        record = self.store.get(job_id)
        if record is None or record.outcome is not None:
            self._free(job)  # the job has ended (a watchdog, say): nothing more to do
            return
        self._lock(job.style).refresh(job_id)
        self.store.update(job_id, beat=time.time())  # a paced run's steps keep it alive
        counters = self._counters(job_id)
        if record.cancel_requested:
            # the chunks never sent count as cancelled, so that the count completes
            if counters.add_rest(plan["total"] - sent_tiles):
                self._finish(JobReporter.of_running_job(self.store, job_id), job)
            return
        if not self._slots().take(job_id):
            self._wait(job_id, counters)
            send_next(coverage, plan, start, sent_tiles, _WAIT_S)
            return
        area = Coverage.from_json(coverage)
        pending = chunks(area, plan, start)
        rate = job.max_tiles_per_s
        batch: list[Chunk] = []
        batch_tiles = 0
        for chunk in pending:
            batch.append(chunk)
            batch_tiles += chunk.size
            if len(batch) >= _SEND_BATCH or rate and batch_tiles >= rate * _PACE_S:
                break
        todo = [c for c, done in zip(batch, counters.done_chunks(batch), strict=True) if not done]
        for chunk in todo:
            send_chunk(chunk, 0.0)
        if next(pending, None) is not None:
            tiles = sum(c.size for c in todo)
            later = tiles / rate if rate else 0.0
            send_next(area.to_json(), plan, start + len(batch), sent_tiles + tiles, later)

    def _wait(self, job_id: str, counters: PretileCounters) -> None:
        """Say once that the run waits for a place (each step keeps the job alive)."""
        if counters.mark("queued"):
            JobReporter.of_running_job(self.store, job_id).line(
                f"Queued: {self._slots().going()} runs going, at most {self.max_runs} at once"
                " (MAPSVC_SEED_MAX_CONCURRENT_RUNS)"
            )

    def render(
        self, job: PretileJob, chunk: Chunk, worker: str = "", retry: SendChunk | None = None
    ) -> None:
        """Render the tiles of one chunk not cached yet (all with ``refresh``, those older than
        ``refresh_before`` with it); count them.

        ``worker`` names the worker doing it (its Celery name): the summary says what each did.
        A chunk that fails is sent again by ``retry`` after a pause, up to
        :data:`CHUNK_ATTEMPTS` starts; then its tiles not made count as failed, and a run with
        more than ``max_failed`` of them ends (its chunks left count as cancelled).
        """
        job_id = job.job_id
        record = self.store.get(job_id)
        if record is None or record.outcome is not None:
            self._free(job)  # the job has ended (resumed by another, say): nothing to count
            return
        store, counters = self.stores.pick(job.s3), self._counters(job_id)
        report = JobReporter.of_running_job(self.store, job_id)
        counts = {"rendered": 0, "skipped": 0, "empty": 0, "cancelled": 0}
        error = None
        failed: list[TileAddress] = []
        if record.cancel_requested:
            counts["cancelled"] = chunk.size
        else:
            attempts = counters.attempt(chunk)
            if attempts == 0:
                return  # the run's counters expired long ago: nothing is left to count into
            if attempts > CHUNK_ATTEMPTS:
                error = f"{_place(chunk)}: its worker process died every time"
                failed = list(chunk.tiles())
            elif (short := self._short_of_space(store)) is not None:
                error, failed = f"{_place(chunk)}: {short}", list(chunk.tiles())
                self._end_early(job_id, counters, "disk_full", short)
            else:
                error = self._render_tiles(chunk, job, store, counts, failed)
                if error is not None and attempts < CHUNK_ATTEMPTS and retry is not None:
                    log.warning("pretile %s: %s; sent again", job_id, error)
                    retry(chunk, _RETRY_S * attempts)
                    return
        last, failed_tiles = counters.add(chunk, counts, error, worker, failed)
        if failed_tiles > self.max_failed and not record.cancel_requested:
            self._end_early(job_id, counters, "too_many_failed", f"{failed_tiles} tiles failed")
        if not counts["cancelled"]:
            text, progress = counters.progress_line(chunk.z)
            with contextlib.suppress(JobCancelledError):  # the chunks left see the flag too
                report.line(text, progress=progress)
        if last:
            self._finish(report, job)

    def _short_of_space(self, store: TileStore) -> str | None:
        """Why the disk cache cannot take more tiles (None: it can, or the store is a
        bucket)."""
        if not isinstance(store, FileTileStore):
            return None
        return short_of_space(store.root, self.keep_free)

    def _end_early(self, job_id: str, counters: PretileCounters, mark: str, why: str) -> None:
        """Stop a run (past its failed tiles, its disk almost full: ``why``), marked ``mark``:
        its chunks left count as cancelled, and its end fails it (:meth:`_end`)."""
        if counters.mark(mark):
            log.warning("pretile %s: %s, stopping the run", job_id, why)
            self.store.request_cancel(job_id)

    def _render_tiles(
        self,
        chunk: Chunk,
        job: PretileJob,
        store: TileStore,
        counts: dict[str, int],
        failed: list[TileAddress] | None = None,
    ) -> str | None:
        """Render the chunk's tiles into ``counts``; the error that stopped it, if one did, and
        then the tiles it did not make in ``failed``.

        The tiles not cached yet (all of them with ``refresh``) are drawn as metatiles: the
        chunk's block as one image (or the blocks of the layer's metatile side in it), cut into
        the tiles the chunk makes; a block holds only those (their bounding box).

        Each tile is stored by a writer thread while the next one is cut or drawn: creating a file
        waits on the file system (measured on the project machine: 0.7 ms a tile alone, 1.5 ms
        with a second process writing: a tenth to a fifth of a tile's render), and that wait need
        not hold the rendering up. A tile of one colour is stored like the chunk's first tile of
        the same bytes (a hard link in a file cache: no new file). A tile counts once it is
        stored; the chunk ends when its last write has.
        """
        variant = job.variant
        codec = self.encoding.codec(variant.format)
        writes: list[tuple[TileAddress, Future[str], bool]] = []
        stopped = threading.Event()  # a write failed: the rest of the chunk is not rendered
        error: BaseException | None = None
        todo: list[TileAddress] = []
        firsts: dict[bytes, str] = {}  # the key of the chunk's first tile of these bytes

        def put(key: str, data: bytes, like: str | None) -> str:
            try:
                return store.put(key, data, like)
            except BaseException:
                stopped.set()
                raise

        with ThreadPoolExecutor(1, thread_name_prefix="pretile-store") as writer:
            try:
                for tile in chunk.tiles():
                    if self._fresh(job, store, tile_key(job.style, job.lang, tile, variant)):
                        counts["skipped"] += 1
                    else:
                        todo.append(tile)
                for tile, rendered in self._draw(job, todo, codec):
                    key = tile_key(job.style, job.lang, tile, variant)
                    like = firsts.setdefault(rendered.data, key) if rendered.solid else key
                    write = writer.submit(put, key, rendered.data, None if like == key else like)
                    writes.append((tile, write, rendered.empty))
                    if stopped.is_set():
                        break
            except Exception as exc:  # noqa: BLE001 - reported below, once the writes are done
                error = exc
        # the writes are done (the executor waited): count what was stored
        stored = set()
        for tile, write, empty in writes:
            if write.exception() is None:
                counts["rendered"] += 1
                counts["empty"] += empty
                stored.add(tile)
            elif error is None:
                error = write.exception()
        if error is None:
            return None
        if failed is not None:
            failed.extend(tile for tile in todo if tile not in stored)
        if isinstance(error, MapsvcError):
            return f"{_place(chunk)}: {error.message}"
        if isinstance(error, OSError):  # the tile cache's disk: full, read-only, …
            reason = f"the tile cache could not be written: {error.strerror or error}"
            log.warning("pretile chunk %s: %s", chunk, reason)
            return f"{_place(chunk)}: {reason}"
        log.error("pretile chunk %s failed", chunk, exc_info=error)
        return f"{_place(chunk)}: internal error {type(error).__name__}"

    @staticmethod
    def _fresh(job: PretileJob, store: TileStore, key: str) -> bool:
        """Whether the run keeps the tile cached under ``key`` (it is not made again)."""
        if job.refresh:
            return False
        if job.refresh_before is None:
            return store.exists(key)
        written = store.modified(key)
        return written is not None and written >= job.refresh_before

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

    def _result(
        self, counters: PretileCounters, summary: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The job's result: the run's summary (read now, unless given), its failed tiles
        listed."""
        summary = summary or counters.summary()
        hidden = ("done", "first_error", "remaining", "eta_s", "resumed_of")
        result = {k: v for k, v in summary.items() if k not in hidden}
        if summary["resumed_of"]:
            result["resumed_of"] = summary["resumed_of"]
        if summary["failed"]:
            result["first_error"] = summary["first_error"]
        result["failed_tiles"] = counters.failed_tiles(self.max_failed + _LISTED_BEYOND)
        return result

    def _finish(self, report: JobReporter, job: PretileJob) -> None:
        """End a pre-tiling job once all its chunks are done, and free its layer and place."""
        try:
            self._end(report, job)
        finally:
            self._free(job)

    def _free(self, job: PretileJob) -> None:
        """Free the run's layer and place (before its final line: whoever reads that line
        finds the layer free)."""
        self._lock(job.style).release(job.job_id)
        self._slots().free(job.job_id)

    def _end(self, report: JobReporter, job: PretileJob) -> None:
        """The job's summary, or what went wrong.

        A run with failed tiles (fewer than ``max_failed``) succeeds and lists them; one that
        had more fails, listing them in the error's detail.
        """
        job_id = job.job_id
        counters = self._counters(job_id)
        counters.end()
        summary = counters.summary()
        too_many = counters.marked("too_many_failed")
        disk_full = counters.marked("disk_full")
        if self.store.cancel_requested(job_id) and not (too_many or disk_full):
            self._free(job)
            report.fail(JobCancelledError("the job was cancelled"))
            return
        report.store.publish(
            job_id,
            f"Done: {summary['rendered']} rendered, {summary['skipped']} skipped (cached), "
            f"{summary['empty']} empty, {summary['failed']} failed,"
            f" in {summary['seconds']} s {report.elapsed_ms}ms",
        )
        result = self._result(counters, summary)
        self._free(job)
        if disk_full:
            report.fail(
                UnavailableError(
                    f"the run stopped: {summary['first_error']}",
                    failed_tiles=result["failed_tiles"],
                )
            )
            return
        if too_many:
            report.fail(
                UnprocessableError(
                    f"the run stopped: {summary['failed']} tiles failed, more than"
                    f" {self.max_failed} (MAPSVC_SEED_MAX_FAILED_TILES); first:"
                    f" {summary['first_error']}",
                    failed_tiles=result["failed_tiles"],
                )
            )
            return
        report.succeed(result)
