"""The follower of watched layers (issue 35): the change log turned into tile expiries.

One per deployment (``mapsvc follow``, started by ``mapsvc up`` and in compose; a second one
waits for the first's lease, :data:`LEASE_KEY`). It listens on the log's channel and reads the
log (:mod:`shared.vector.watch`) from its position (:data:`POSITION_KEY`, in Redis): a change
made while it was away, or whose ``NOTIFY`` it missed, is read all the same (it also looks
every ``poll_s``). Changes that come together are taken together, a moment after the first
(``coalesce_s``): per layer, their boxes (at most :data:`MAX_BOXES`, grown into coarser cells
past it). For each layer it drops, at every zoom:

- the API's cached vector tiles that meet a box (grown by ``buffer_px``), and its other
  answers of the layer (GeoJSON pages, OGC items);
- the nginx front's kept vector tiles that meet one;
- the cached raster tiles (disk, bucket) of every style whose PostGIS datasource reads the
  table (:meth:`~shared.tiles.styles.StyleInfo.draws`);

and says so: a ``layer-changed`` line (layer, bbox, tiles expired) on the stream of every job
and on the layer's own stream (:func:`layer_stream`), which the viewer follows. Its position
moves past the changes only once they are expired; a tile read from the database before a
change committed and stored after its expiry is caught by the same expiry again ``settle_s``
later (a tile's statement takes at most the statement timeout).
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import redis
import shapely  # type: ignore[import-untyped]

from shared.base.grid import MAX_ZOOM
from shared.events import ALL_JOBS_STREAM
from shared.job_messages import Sweep
from shared.seeding.coverage import Coverage
from shared.seeding.tile_sets import CoverageTiles
from shared.seeding.truncate import run_sweep
from shared.tiles.stores import TileStores
from shared.tiles.styles import styles_drawing
from shared.vector.cache import WATCHED_KEY
from shared.vector.front_cache import Known
from shared.vector.watch import (
    CELL_DEG,
    CHANNEL,
    Change,
    changes_after,
    newest_change,
    prune,
    watched,
)

__all__ = [
    "LEASE_KEY",
    "MAX_BOXES",
    "POSITION_KEY",
    "Follower",
    "LayerChange",
    "coalesce",
    "layer_stream",
    "merged",
]

log = logging.getLogger(__name__)

#: the last change of the log the follower expired
POSITION_KEY = "mapsvc:watch:position"
#: who follows: the one follower of the deployment renews it while it runs
LEASE_KEY = "mapsvc:watch:follower"
#: the most boxes of one layer expired at once (coarser cells past it)
MAX_BOXES = 1024
#: changes read at once
_BATCH = 5000
#: lines kept in a layer's stream
_STREAM_MAXLEN = 1000
_STREAM_TTL_S = 24 * 3600
_ALL_MAXLEN = 50000


def layer_stream(layer: str) -> str:
    """The Redis stream of a layer's ``layer-changed`` lines."""
    return f"mapsvc:layer:{layer}:changes"


@dataclass
class LayerChange:
    """What changed of one layer in a batch: its boxes (None: everywhere) and how many
    changes."""

    layer: str
    boxes: list[list[float]] | None = field(default_factory=list)
    changes: int = 0

    @property
    def bbox(self) -> list[float] | None:
        """The box of all its boxes (None: everywhere)."""
        if self.boxes is None or not self.boxes:
            return None
        return [
            min(b[0] for b in self.boxes),
            min(b[1] for b in self.boxes),
            max(b[2] for b in self.boxes),
            max(b[3] for b in self.boxes),
        ]


def coalesce(changes: Iterable[Change], most: int = MAX_BOXES) -> list[LayerChange]:
    """The changes by layer, in the order they first came: their boxes together, grown into
    coarser cells past ``most``; a ``TRUNCATE`` (no box) makes the layer's change everywhere."""
    return merged((LayerChange(c.layer, c.boxes, 1) for c in changes), most)


def merged(changes: Iterable[LayerChange], most: int = MAX_BOXES) -> list[LayerChange]:
    """Layers' changes merged by layer (:func:`coalesce`'s rules)."""
    found: dict[str, LayerChange] = {}
    for change in changes:
        layer = found.setdefault(change.layer, LayerChange(change.layer))
        layer.changes += change.changes
        if layer.boxes is None:
            continue
        if change.boxes is None:
            layer.boxes = None
        else:
            layer.boxes.extend(change.boxes)
    for layer in found.values():
        if layer.boxes is not None:
            layer.boxes = _grown(layer.boxes, most)
    return list(found.values())


def _grown(boxes: list[list[float]], most: int) -> list[list[float]]:
    """``boxes``, at most ``most`` of them: merged by cells of growing size until they fit."""
    cell = CELL_DEG  # (the cells the triggers group rows by)
    while len(boxes) > most:
        cells: dict[tuple[int, int], list[float]] = {}
        for w, s, e, n in boxes:
            key = (math.floor(w / cell), math.floor(s / cell))
            known = cells.get(key)
            cells[key] = (
                [w, s, e, n]
                if known is None
                else [min(known[0], w), min(known[1], s), max(known[2], e), max(known[3], n)]
            )
        boxes, cell = list(cells.values()), cell * 4
    return boxes


def _coverage(boxes: list[list[float]] | None, buffer_px: int) -> Coverage | None:
    """Where the boxes are, each tile grown by ``buffer_px`` (None: everywhere). A box of a
    point or a line along an axis has no area: it is given a hair's."""
    if boxes is None:
        return None
    hair = 1e-9
    shapes = [shapely.box(w - hair, s - hair, e + hair, n + hair) for w, s, e, n in boxes]
    return Coverage.of_geometry(shapely.union_all(shapes), buffer_px)


class _Quiet:
    """A sweep's report for the follower: lines to the log; never cancelled."""

    def line(self, text: str, *, progress: float | None = None) -> None:
        log.debug("%s", text)

    def cancelled(self) -> bool:
        return False


@dataclass
class Follower:
    """Follows the change log of the watched layers and expires what each change made stale.

    Attributes:
        conninfo: the database (psycopg's connection string).
        client: Redis, decoding responses (the API's vector answers, the position, streams).
        stores: the raster tile caches.
        mapnik_dir: the styles, to find those that draw a watched table.
        front: the nginx front's vector tiles (``folder``, ``patterns``); None: no front.
        buffer_px: pixels around each tile that a change in them makes stale.
        coalesce_s: how long after a change's wake-up the follower reads (changes together).
        poll_s: the longest wait between two reads of the log (a missed ``NOTIFY``).
        settle_s: when the same expiry runs again (a tile stored from before the change).
        lease_s: how long its lease lasts unless renewed.
    """

    conninfo: str
    client: redis.Redis
    stores: TileStores
    mapnik_dir: Path
    front: dict[str, Any] | None = None
    buffer_px: int = 16
    coalesce_s: float = 0.05
    poll_s: float = 1.0
    settle_s: float = 12.0
    lease_s: float = 10.0
    _again: list[tuple[float, list[LayerChange]]] = field(default_factory=list)
    _front_known: Known = field(default_factory=dict)
    _me: str = field(default_factory=lambda: f"{socket.gethostname()} pid {os.getpid()}")

    def run(self, stop: threading.Event) -> None:
        """Follow until ``stop`` is set: take the lease, connect, listen, catch up, expire;
        connect again after the database or Redis failed (a pause that doubles, to 10 s)."""
        pause = 0.5
        while not stop.is_set():
            try:
                if not self._lease():
                    stop.wait(self.lease_s / 2)
                    continue
                with psycopg.connect(self.conninfo, autocommit=True) as conn:
                    self._follow(conn, stop)
                pause = 0.5
            except (psycopg.Error, redis.RedisError, OSError) as exc:
                log.warning("follower: %s; again in %.1f s", exc, pause)
                stop.wait(pause)
                pause = min(pause * 2, 10.0)
        if self.client.get(LEASE_KEY) == self._me:  # the next follower need not wait
            self.client.delete(LEASE_KEY)

    def _lease(self) -> bool:
        """Take or renew the follower's lease; False when another follower holds it."""
        ms = int(self.lease_s * 1000)
        if self.client.set(LEASE_KEY, self._me, nx=True, px=ms):
            return True
        if self.client.get(LEASE_KEY) == self._me:
            self.client.pexpire(LEASE_KEY, ms)
            return True
        return False

    def _follow(self, conn: psycopg.Connection[Any], stop: threading.Event) -> None:
        conn.execute(f"LISTEN {CHANNEL}")
        self.sync_watched(conn)
        if int(self.client.get(POSITION_KEY) or 0) > newest_change(conn):
            # a log made again (its ids start over): read it from its start
            self.client.set(POSITION_KEY, 0)
        while not stop.is_set():
            if not self._lease():
                return
            self.catch_up(conn)
            woken = any(True for _ in conn.notifies(timeout=self._wait(), stop_after=1))
            if woken and self.coalesce_s:
                time.sleep(self.coalesce_s)  # the changes that come with it, together
            for _ in conn.notifies(timeout=0):  # (read whatever came meanwhile)
                pass

    def _wait(self) -> float:
        """How long to wait for a wake-up: the poll, or until an expiry is due again."""
        due = min((when for when, _ in self._again), default=math.inf)
        return max(0.0, min(self.poll_s, due - time.monotonic()))

    def sync_watched(self, conn: psycopg.Connection[Any]) -> list[str]:
        """Make Redis's list of the watched layers the database's (the API reads it)."""
        layers = [w.layer for w in watched(conn)]
        pipe = self.client.pipeline()
        pipe.delete(WATCHED_KEY)
        if layers:
            pipe.sadd(WATCHED_KEY, *layers)
        pipe.execute()
        return layers

    def catch_up(self, conn: psycopg.Connection[Any]) -> list[LayerChange]:
        """Expire every change after the position, and what is due again; the layers'
        changes expired now."""
        now = time.monotonic()
        due = [change for when, batch in self._again if when <= now for change in batch]
        self._again = [(when, batch) for when, batch in self._again if when > now]
        if due:  # every batch due, together: one sweep a layer
            self._expire(merged(due), announce=False)
        done: list[LayerChange] = []
        position = int(self.client.get(POSITION_KEY) or 0)
        while True:
            changes = changes_after(conn, position, _BATCH)
            if not changes:
                return done
            known = {str(m) for m in self.client.smembers(WATCHED_KEY)}
            if any(c.layer not in known for c in changes):  # watched meanwhile
                self.sync_watched(conn)
            batch = coalesce(changes)
            self._expire(batch, announce=True)
            self._again.append((time.monotonic() + self.settle_s, batch))
            position = changes[-1].id
            self.client.set(POSITION_KEY, position)
            prune(conn, position)
            done.extend(batch)

    def _expire(self, batch: Sequence[LayerChange], *, announce: bool) -> None:
        for change in batch:
            started = time.monotonic()
            tiles = self.expire(change)
            if announce:
                self._announce(change, tiles, time.monotonic() - started)

    def expire(self, change: LayerChange) -> int:
        """Drop what ``change`` made stale from every cache of its layer; the tiles dropped."""
        tiles = CoverageTiles(_coverage(change.boxes, self.buffer_px)).to_json()
        front = None if self.front is None else {**self.front, "names": [change.layer]}
        report = _Quiet()
        found = run_sweep(
            Sweep(change.layer, True, tiles, 0, MAX_ZOOM + 1, front=front, answers=True),
            report,
            stores=self.stores,
            client=self.client,
            front_known=self._front_known,
        )
        dropped = int(found["removed"])
        schema, _, table = change.layer.partition(".")
        stores = ["file"] + (["s3"] if self.stores.s3 is not None else [])
        for style in styles_drawing(self.mapnik_dir, schema, table):
            swept = run_sweep(
                Sweep(style, False, tiles, 0, MAX_ZOOM + 1, stores=stores),
                report,
                stores=self.stores,
                client=self.client,
            )
            dropped += int(swept["removed"])
        return dropped

    def _announce(self, change: LayerChange, tiles: int, seconds: float) -> None:
        """The ``layer-changed`` line, on the stream of all jobs and the layer's."""
        text = "layer-changed " + json.dumps(
            {
                "layer": change.layer,
                "bbox": change.bbox,
                "tiles": tiles,
                "changes": change.changes,
                "seconds": round(seconds, 3),
            },
            separators=(",", ":"),
        )
        fields = {"job": "watch", "text": text, "final": "0"}
        stream = layer_stream(change.layer)
        pipe = self.client.pipeline()
        pipe.xadd(stream, fields, maxlen=_STREAM_MAXLEN, approximate=True)  # type: ignore[arg-type]
        pipe.expire(stream, _STREAM_TTL_S)
        pipe.xadd(ALL_JOBS_STREAM, fields, maxlen=_ALL_MAXLEN, approximate=True)  # type: ignore[arg-type]
        pipe.execute()
        log.info("%s", text)
