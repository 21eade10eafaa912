"""A bounded pool of render processes, each keeping its loaded maps (Mapnik holds the GIL).

Admission control keeps the pool's queue bounded: at most ``max_queue`` renders wait or run
in one API process, and at most ``max_large`` of them larger than a tile (BBOX renders) run at
once, so that big renders never hold ordinary tiles up for long: the others wait their turn, in
order, within the queue's places. A render past the queue is refused at once (503 with
``Retry-After``); a render that has not ended ``timeout_s`` after it was asked (its wait for a
turn included) answers 503 too, and keeps its place in the queue until its process is done with
it (the work stays bounded).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared.base.encoder import Background
from shared.base.encoding import PNG_CODEC, Codec
from shared.base.grid import RenderArea
from shared.base.png import Rendered
from shared.errors import UnavailableError
from shared.memory import keep_image_memory
from shared.metrics import RENDER_QUEUE
from shared.raster.rendering import Rendering

if TYPE_CHECKING:
    from shared.tiles.render import TileRenderer

__all__ = ["RenderLimits", "RenderPool"]

#: how much lower than the API process render processes run
_NICE = 5

_renderer: TileRenderer | None = None


def _start(mapnik_dir: str, tile_size: int) -> None:
    # renders yield the CPU to the API's event loop: a flood of big renders never keeps the
    # process that answers requests (tiles from the cache, 503s, /ready) from running
    os.nice(_NICE)
    keep_image_memory()  # each render's image and pixels: the same memory, not fresh pages
    # only render processes import Mapnik (through shared.tiles.render)
    from shared.tiles.render import TileRenderer

    global _renderer
    _renderer = TileRenderer(Path(mapnik_dir), tile_size)


def _started() -> int:
    time.sleep(0.05)  # held a moment, so that each of the warm-up calls gets its own process
    return os.getpid()


def _render(
    style: str,
    lang: str,
    area: RenderArea,
    codec: Codec,
    rendering: Rendering | None,
    background: Background | None,
) -> Rendered:
    assert _renderer is not None, "the render process was not started by RenderPool"
    return _renderer.render(style, lang, area, codec, rendering, background)


def _consume(job: asyncio.Future[Rendered]) -> None:
    # nobody awaits a render given up on: retrieve its outcome so none is logged as lost
    if not job.cancelled():
        job.exception()


@dataclass(frozen=True)
class RenderLimits:
    """The bounds of a render pool's queue (settings ``MAPSVC_RENDER_*``)."""

    max_queue: int = 64
    max_large: int = 1
    timeout_s: float = 30.0


class RenderPool:
    """Renders in ``processes`` processes (spawned: the API has threads).

    The processes start on first use, or all at once with :meth:`warm_up` (the API does it
    when it starts, so that the first burst of requests does not pay for the start of Mapnik).
    """

    def __init__(
        self,
        mapnik_dir: Path,
        processes: int,
        tile_size: int = 256,
        limits: RenderLimits | None = None,
    ) -> None:
        self._args = (str(mapnik_dir), tile_size)
        self._processes = processes
        self._tile_pixels = tile_size * tile_size
        self._lock = threading.Lock()
        self._executor: ProcessPoolExecutor | None = None
        self.limits = limits or RenderLimits()
        #: renders waiting or running, all and larger than a tile
        self.pending = 0
        self.pending_large = 0
        self._large_turns: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    def _admit(self, large: bool) -> None:
        """Take a place in the queue, or refuse the render when the queue is full."""
        if self.pending >= self.limits.max_queue:
            raise UnavailableError(
                "too many renders in progress; try again shortly",
                retry_after_s=1,
                pending=self.pending,
            )
        self.pending += 1
        self.pending_large += large
        RENDER_QUEUE.inc()

    def _release(self, large: bool, turn: bool) -> None:
        self.pending -= 1
        self.pending_large -= large
        RENDER_QUEUE.dec()
        if turn:
            self._turns().release()

    def _turns(self) -> asyncio.Semaphore:
        """The turns of large renders (``max_large`` at once), of the running event loop."""
        loop = asyncio.get_running_loop()
        if self._large_turns is None or self._large_turns[0] is not loop:
            self._large_turns = (loop, asyncio.Semaphore(self.limits.max_large))
        return self._large_turns[1]

    def _pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ProcessPoolExecutor(
                    max_workers=self._processes,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_start,
                    initargs=self._args,
                )
            return self._executor

    async def warm_up(self) -> int:
        """Start every render process now (Mapnik loaded); returns how many answered."""
        loop = asyncio.get_running_loop()
        pool = self._pool()
        pids = await asyncio.gather(
            *(loop.run_in_executor(pool, _started) for _ in range(self._processes))
        )
        return len(set(pids))

    def _restart(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is broken:
                self._executor = None
        broken.shutdown(wait=False, cancel_futures=True)

    async def render(
        self,
        style: str,
        lang: str,
        area: RenderArea,
        codec: Codec = PNG_CODEC,
        rendering: Rendering | None = None,
        background: Background | None = None,
    ) -> Rendered:
        """Render in a pool process (see :meth:`TileRenderer.render`).

        A render is large when it has more pixels than a tile at its scale (an ``@2x`` tile is
        not large).

        Raises:
            UnavailableError: the queue is full, the render took longer than the timeout, or a
                render process died twice in a row.
        """
        large = area.width * area.height > self._tile_pixels * area.scale**2
        self._admit(large)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.timeout_s
        if large:  # its turn: at most max_large at once, the others wait in order
            try:
                await asyncio.wait_for(self._turns().acquire(), self.limits.timeout_s)
            except BaseException as exc:
                self._release(large, turn=False)
                if isinstance(exc, TimeoutError):
                    raise UnavailableError(
                        f"a large render waited longer than {self.limits.timeout_s:g} s for its"
                        " turn; try again shortly",
                        retry_after_s=self.limits.timeout_s,
                    ) from None
                raise
        job = asyncio.ensure_future(self._run(style, lang, area, codec, rendering, background))
        job.add_done_callback(lambda _: self._release(large, turn=large))
        try:
            return await asyncio.wait_for(asyncio.shield(job), max(0.0, deadline - loop.time()))
        except TimeoutError:
            # the process goes on with it (a process cannot be stopped mid-render) and the
            # render keeps its place in the queue until then
            job.add_done_callback(_consume)
            raise UnavailableError(
                f"the render took longer than {self.limits.timeout_s:g} s",
                retry_after_s=self.limits.timeout_s,
            ) from None

    async def _run(self, *args: Any) -> Rendered:
        """Render ``args`` (those of :func:`_render`) in a pool process, starting afresh once."""
        loop = asyncio.get_running_loop()
        for _ in range(2):
            pool = self._pool()
            try:
                return await loop.run_in_executor(pool, _render, *args)
            except BrokenProcessPool:
                self._restart(pool)  # a render process died (Mapnik crashed); start afresh
        raise UnavailableError("the render processes keep dying; see the server log")

    def close(self) -> None:
        """Stop the processes."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
