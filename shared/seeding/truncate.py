"""Truncation and expiry (issue 25): a layer's cached tiles in a set of tiles, removed (or, for
expiry's ``rerender``, drawn again), as a job.

A raster layer's tiles are files or objects ``<style>/<lang>/<z>/<x>/<y>[@2x].<ext>``: every
language folder the cache holds and every variant (:data:`~shared.base.formats.VARIANTS`)
unless the job names some, in the stores it names (the disk, the bucket). They are found by
walking the cache (:mod:`shared.seeding.cache_walk`), zoom by zoom, so the work is the cached
tiles in the set's columns, never the set's tiles (billions at deep zooms). A vector layer's
tiles are the API's cached answers (:func:`~shared.vector.cache.drop_cached_tiles`) and the
nginx front's kept ones (:func:`~shared.vector.front_cache.drop_front_tiles`).

Each zoom ends with a progress line (``Zoom 12: 340 tiles removed``); a cancelled job stops
after the tile drawn or the column of the cache it is at. A pre-tiling run of the layer going on
meanwhile puts back what it renders.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import redis

from shared.base.formats import VARIANTS, TileVariant
from shared.base.grid import TileAddress
from shared.errors import JobCancelledError, MapsvcError
from shared.job_messages import Sweep
from shared.seeding.cache_walk import CachedTile, cached_langs, cached_tiles
from shared.seeding.plan import PLAN_MAX_S, check_zooms
from shared.seeding.tile_sets import TileSet, tile_set_from_json
from shared.tiles.store import TileStore
from shared.tiles.stores import TileStores
from shared.vector.cache import drop_cached_tiles
from shared.vector.front_cache import Known, drop_front_tiles

__all__ = ["Render", "SweepReport", "plan_sweep", "run_sweep"]


class SweepReport(Protocol):
    """Where a sweep reports: a job's :class:`~shared.jobs.JobReporter`, or the follower of
    watched layers (:mod:`shared.seeding.follow`)."""

    def line(self, text: str, *, progress: float | None = None) -> None:
        """Report a line; raises :class:`~shared.errors.JobCancelledError` when cancelled."""

    def cancelled(self) -> bool:
        """Whether the sweep is to stop."""


#: draws a tile of a style in a language and variant: its encoded bytes
Render = Callable[[str, str, TileAddress, TileVariant], bytes]
#: seconds between two looks at the cancel flag within a zoom
_CANCEL_EVERY_S = 0.2


def plan_sweep(tiles: TileSet, minzoom: int, maxzoom: int) -> dict[str, Any]:
    """The tiles of the set per zoom, which a job may find cached (``dryrun=1``).

    A zoom a coverage is too large to count by :data:`~shared.seeding.pretile.PLAN_MAX_S` is
    ``tiles: null``, as is every zoom below it; ``total`` counts the others.

    Raises:
        InvalidInputError: the zooms are out of the grid, or none.
    """
    check_zooms(minzoom, maxzoom)
    deadline = time.monotonic() + PLAN_MAX_S
    zooms: list[dict[str, Any]] = []
    for z in range(minzoom, maxzoom):
        counted = not zooms or zooms[-1]["tiles"] is not None
        zooms.append({"zoom": z, "tiles": tiles.count(z, deadline) if counted else None})
    return {
        "minzoom": minzoom,
        "maxzoom": maxzoom,
        "zooms": zooms,
        "total": sum(z["tiles"] for z in zooms if z["tiles"] is not None),
    }


class _Run:
    """One job's walk: its counts, and how it looks at the cancel flag."""

    def __init__(self, sweep: Sweep, report: SweepReport, render: Render | None, budget: int):
        self.sweep = sweep
        self.report = report
        self.render = render if sweep.rerender and not sweep.vector else None
        self.budget = budget if self.render is not None else 0
        self.removed: Counter[int] = Counter()
        self.rerendered: Counter[int] = Counter()
        self.render_error: str | None = None
        self._looked = time.monotonic()

    def check(self) -> None:
        """Stop when the job is cancelled (a look at most every 0.2 s)."""
        now = time.monotonic()
        if now - self._looked >= _CANCEL_EVERY_S:
            self._looked = now
            if self.report.cancelled():
                raise JobCancelledError("the job was cancelled")

    def _draw(self, store: TileStore, tile: CachedTile) -> bool:
        """Draw a tile again into ``store``; False when it cannot be (it is removed)."""
        assert self.render is not None
        try:
            store.put(tile.key, self.render(self.sweep.layer, tile.lang, tile.tile, tile.variant))
        except MapsvcError as exc:
            self.render_error = self.render_error or exc.message
            self.budget = 0  # the style cannot be drawn: the rest is removed
            return False
        self.budget -= 1
        return True

    def batch(self, store: TileStore, z: int, found: list[CachedTile]) -> None:
        """Draw again (while the budget lasts) or remove the tiles of a batch."""
        gone = []
        for tile in found:
            if self.budget > 0 and self._draw(store, tile):
                self.rerendered[z] += 1
                self.check()
            else:
                gone.append(tile.key)
        try:
            self.removed[z] += store.delete_many(gone)
        except OSError as exc:  # the disk: read-only, a folder of another user, …
            raise MapsvcError(
                f"the tile cache could not be changed: {exc.strerror or exc}"
            ) from exc
        self.check()


def _line(z: int, removed: int, rerendered: int) -> str:
    drawn = f", {rerendered} rendered again" if rerendered else ""
    return f"Zoom {z}: {removed} tiles removed{drawn}"


def _raster(run: _Run, stores: TileStores, tiles: TileSet) -> dict[str, Any]:
    sweep = run.sweep
    variants = (
        None if sweep.variants is None else frozenset(map(TileVariant.from_name, sweep.variants))
    )
    picked = [(stores.pick(name == "s3"), name) for name in sweep.stores]
    langs = {name: sweep.langs or cached_langs(store, sweep.layer) for store, name in picked}
    zooms = range(sweep.minzoom, sweep.maxzoom)
    for i, z in enumerate(zooms):
        for store, name in picked:
            for lang in langs[name]:
                for found in cached_tiles(store, sweep.layer, lang, z, tiles, variants):
                    run.batch(store, z, found)
        run.report.line(_line(z, run.removed[z], run.rerendered[z]), progress=(i + 1) / len(zooms))
    return {
        "stores": sweep.stores,
        "langs": sorted({lang for found in langs.values() for lang in found}),
        "formats": sorted(v.name for v in VARIANTS) if variants is None else sweep.variants,
    }


def _vector(run: _Run, client: redis.Redis, tiles: TileSet, known: Known | None) -> dict[str, Any]:
    sweep = run.sweep

    @functools.cache  # (a tile is asked of once per answer: mounts, encodings, parameters)
    def wanted(tile: TileAddress) -> bool:
        if not sweep.minzoom <= tile.z < sweep.maxzoom:
            return False
        return bool(tiles.meets(tile.z, np.array([tile.x]), np.array([tile.y]))[0])

    api = drop_cached_tiles(client, sweep.layer, wanted, answers=sweep.answers)
    run.report.line(f"API vector cache: {len(api)} tiles removed")
    front = None
    if sweep.front is not None:
        front = drop_front_tiles(
            Path(sweep.front["folder"]),
            sweep.front["patterns"],
            sweep.layer,
            wanted,
            aliases=sweep.front.get("names", ()),
            known=known,
        )
        text = (
            "not readable here: its tiles end with their TTL"
            if front is None
            else f"{len(front)} tiles expired (asked of the API again)"
        )
        run.report.line(f"Front's vector cache: {text}")
    for tile in [*api, *(front or [])]:
        run.removed[tile.z] += 1
    return {"vector_cache": len(api), "front_cache": None if front is None else len(front)}


def run_sweep(
    sweep: Sweep,
    report: SweepReport,
    *,
    stores: TileStores,
    client: redis.Redis,
    render: Render | None = None,
    rerender_max: int = 0,
    front_known: Known | None = None,
) -> dict[str, Any]:
    """Remove (or draw again) the layer's cached tiles of a sweep; the job's result.

    Args:
        sweep: the job's parameters.
        report: the job's reporter (a line per zoom; its cancel flag stops the walk).
        stores: the tile caches (``sweep.stores`` picks among them).
        client: Redis, where the API's vector answers are kept.
        render: draws a tile (``rerender``).
        rerender_max: most tiles drawn again; the others found are removed.
        front_known: what the front's files hold, as read before (a caller that sweeps often
            keeps it: :data:`~shared.vector.front_cache.Known`).

    Returns:
        ``layer``, ``mode``, ``minzoom``, ``maxzoom``, ``zooms`` (each ``zoom``, ``removed``,
        ``rerendered``), ``removed``, ``rerendered``, ``seconds``, and for a raster layer the
        ``stores``, ``langs`` and ``formats`` looked at, for a vector layer the tiles removed
        from the API's cache (``vector_cache``) and the front's (``front_cache``).

    Raises:
        JobCancelledError: the job was cancelled.
        UnavailableError: object storage failed.
        MapsvcError: the disk refused a removal.
    """
    started = time.monotonic()
    tiles = tile_set_from_json(sweep.tiles)
    run = _Run(sweep, report, render, rerender_max)
    where = (
        _vector(run, client, tiles, front_known) if sweep.vector else _raster(run, stores, tiles)
    )
    zooms = range(sweep.minzoom, sweep.maxzoom)
    result = {
        "layer": sweep.layer,
        "mode": "rerender" if run.render is not None else "remove",
        "minzoom": sweep.minzoom,
        "maxzoom": sweep.maxzoom,
        "zooms": [
            {"zoom": z, "removed": run.removed[z], "rerendered": run.rerendered[z]} for z in zooms
        ],
        "removed": sum(run.removed.values()),
        "rerendered": sum(run.rerendered.values()),
        **where,
        "seconds": round(time.monotonic() - started, 3),
    }
    if run.render_error is not None:
        result["render_error"] = run.render_error
    return result
