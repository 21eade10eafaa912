"""A bounded pool of render processes, each keeping its loaded maps (Mapnik holds the GIL)."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TYPE_CHECKING

from shared.errors import UnavailableError
from shared.tiles.png import Rendered

if TYPE_CHECKING:
    from shared.tiles.render import TileRenderer

__all__ = ["RenderPool"]

_renderer: TileRenderer | None = None


def _start(mapnik_dir: str, tile_size: int) -> None:
    # only render processes import Mapnik (through shared.tiles.render)
    from shared.tiles.render import TileRenderer

    global _renderer
    _renderer = TileRenderer(Path(mapnik_dir), tile_size)


def _render(
    style: str,
    lang: str,
    bbox: tuple[float, float, float, float],
    width: int,
    height: int,
    srs: str | None,
) -> Rendered:
    assert _renderer is not None, "the render process was not started by RenderPool"
    return _renderer.render(style, lang, bbox, width, height, srs)


class RenderPool:
    """Renders in ``processes`` processes, started on first use (spawned: the API has threads)."""

    def __init__(self, mapnik_dir: Path, processes: int, tile_size: int = 256) -> None:
        self._args = (str(mapnik_dir), tile_size)
        self._processes = processes
        self._lock = threading.Lock()
        self._executor: ProcessPoolExecutor | None = None

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

    def _restart(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is broken:
                self._executor = None
        broken.shutdown(wait=False, cancel_futures=True)

    async def render(
        self,
        style: str,
        lang: str,
        bbox: tuple[float, float, float, float],
        width: int,
        height: int,
        srs: str | None = None,
    ) -> Rendered:
        """Render in a pool process (see :meth:`TileRenderer.render`).

        Raises:
            UnavailableError: a render process died twice in a row.
        """
        loop = asyncio.get_running_loop()
        for _ in range(2):
            pool = self._pool()
            try:
                return await loop.run_in_executor(
                    pool, _render, style, lang, bbox, width, height, srs
                )
            except BrokenProcessPool:
                self._restart(pool)  # a render process died (Mapnik crashed); start afresh
        raise UnavailableError("the render processes keep dying; see the server log")

    def close(self) -> None:
        """Stop the processes."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
