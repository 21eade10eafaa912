"""Benchmark: watched layers (issue 35), from a COMMIT to a fresh tile through the front, loaded.

    .venv/bin/python -m tests.bench.bench_watch [--seconds 30] [--rate 200] [--concurrency 16]

PostgreSQL with PostGIS, Redis, nginx and ``wrk`` must be there (``bash deploy/services.sh
--test-tools``). In one run:

- a database of its own, ``mapsvc_bench_watch`` (dropped and made afresh; dropped again at the
  end unless ``--keep``), holds ``public.watch_points``: ``--points`` random points (100,000)
  over ``--region`` (6..10 E, 45..48 N), a primary key, a GiST index and statistics. Its first
  ``--probe-rows`` rows are the probes' own, the others the writers';
- the service as ``mapsvc up`` runs it behind the front: the API (``mapsvc serve``'s uvicorn
  command, ``--workers`` processes) on a loopback port, the nginx front before it
  (``api.front``) keeping the anonymous vector tiles of the layer, made public,
  ``--front-ttl-s`` (``MAPSVC_FRONT_VTILE_TTL_S``, 600 s), and the follower (``mapsvc
  follow``); all with the same ``MAPSVC_*`` environment, a work dir of their own (0755: nginx's
  workers pass it), a Redis db of their own (``--redis``, db 5: flushed first and at the end),
  a random admin key and quotas they do not reach (the load comes from one address, which
  stands for many clients: ``MAPSVC_DB_STATEMENTS_PER_CALLER`` is raised too). The layer is
  watched through the API (``PUT /watches/public.watch_points``, the admin key); the
  follower's settings are the defaults (``MAPSVC_WATCH_SETTLE_S`` 12 s,
  ``MAPSVC_WATCH_BUFFER_PX`` 16);
- every tile of ``--zooms`` (10-12) over the region is asked once through the front (both
  caches filled). Then, all at once, until the last probe is done:

  - ``wrk`` reads those tiles through the front at full speed: ``--concurrency`` connections,
    anonymous, ``Accept-Encoding: gzip``, the tiles in a fixed shuffled order, cycled;
    ``counted.lua`` counts the answers by status. Its tiles/s are its 200, 204 and 304 answers
    over its whole run;
  - writers commit ``--rate`` single-row statements a second in all (200), the probes'
    included: over ``--writers`` connections, ``UPDATE``s moving one random point of theirs to
    a random place of the region, paced (slot ``i`` at ``i / rate`` s; a late one goes at
    once, none is skipped), each its own transaction (autocommit);
  - ``--probe-rate`` of those a second (5) are probes, started for ``--seconds``: a probe row
    is moved to a place at least two tiles away from where it was at ``--probe-zoom`` (12),
    and given a new name. Just before, both tiles (where the row is, where it goes) are read
    through the front as wrk reads them, again when the API answered, so that the front keeps
    them, and the old one must show the row's current name. From the moment the ``UPDATE`` is
    sent, both are read through the front every ``--poll-ms`` (50 ms), each on a keep-alive
    connection, until the new tile's features carry the new name and the old tile's no longer
    carry the old one (the tiles' string values, decoded from the MVT, the gzip undone).
    Staleness: from sending the statement to the later of the two answers that showed it (it
    overstates by at most the statement's own time, an answer's time and one poll
    interval). ``--recheck-s`` (2 s) after that both are read once more: a tile stale again (an
    answer drawn before the commit and kept after the expiry) is counted. A probe not fresh
    within ``--probe-timeout-s`` is counted as never fresh (infinitely stale).

Printed: the load achieved (rows/s committed and the statements' time; tiles/s read through the
front, answers by status), the follower's expiries (its ``layer-changed`` lines: changes, tiles
and seconds of each), its lag behind the log and its CPU; then the staleness of the probes (p50,
p95, max) against the goal (issue 35): p95 <= 2 s while 200 rows/s are written and tiles are
read at full speed. On 2 cores shared by everything, wrk included, figures move from run to run:
the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import math
import os
import random
import re
import signal
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import morecantile
import psycopg
import redis.asyncio as aioredis

from api.cli import serve_argv
from api.cli_watch import follower_argv
from api.front import front_argv, write_front_config
from shared.redis_clients import sync_client
from shared.seeding.follow import POSITION_KEY, layer_stream
from tests.bench._harness import (
    Deadline,
    HttpConnection,
    Server,
    add_load_run_arguments,
    admin_key,
    begin_load_run,
    check_flushable,
    free_port,
    fresh_database,
    goal,
    load_average,
    parse_wrk,
    scratch,
    service_settings,
    start,
    summary_line,
    wait_http,
)
from tests.bench.bench_vector import _fields, http_pass, run_async

ROOT = Path(__file__).resolve().parents[2]
COUNTED_LUA = Path(__file__).with_name("counted.lua")
BENCH_DB = "mapsvc_bench_watch"
LAYER = "public.watch_points"
TMS = morecantile.tms.get("WebMercatorQuad")
GZIP = "Accept-Encoding: gzip\r\n"  # as wrk and map clients ask: the entries wrk reads

Tile = tuple[int, int, int]  # z, x, y
Region = tuple[float, float, float, float]  # west, south, east, north

#: wrk: the tiles of a file (its first argument), cycled, each thread from its own place; the
#: answers counted by status (counted.lua)
_CYCLE_LUA = """
dofile("{counted}")

function init(args)
  urls = {{}}
  for line in io.lines(args[1]) do urls[#urls + 1] = line end
  i = (id - 1) * math.floor(#urls / tonumber(args[2]))
end

function request()
  i = i % #urls + 1
  return wrk.format("GET", urls[i])
end
"""


# --- the database ------------------------------------------------------------------------------


def make_db(pg: str, points: int, region: Region, seed: float) -> tuple[str, str]:
    """The bench database made afresh with its table; its SQLAlchemy URL and a line about it."""
    url = fresh_database(pg, BENCH_DB)
    west, south, east, north = region
    t0 = time.perf_counter()
    with psycopg.connect(f"{pg}/{BENCH_DB}", autocommit=True, connect_timeout=5) as conn:
        conn.execute("CREATE EXTENSION postgis")
        conn.execute(
            "CREATE TABLE public.watch_points (id integer PRIMARY KEY, name text NOT NULL,"
            " geom geometry(Point, 4326) NOT NULL)"
        )
        conn.execute("SELECT setseed(%s)", (seed,))
        conn.execute(
            "INSERT INTO public.watch_points SELECT i, 'point ' || i,"
            " ST_SetSRID(ST_MakePoint(%(w)s + random() * %(dx)s, %(s)s + random() * %(dy)s),"
            " 4326) FROM generate_series(1, %(n)s) AS i",
            {"w": west, "dx": east - west, "s": south, "dy": north - south, "n": points},
        )
        conn.execute("CREATE INDEX ON public.watch_points USING gist (geom)")
        conn.execute("ANALYZE public.watch_points")
        postgis = conn.execute("SELECT postgis_lib_version()").fetchone()
    about = (
        f"database {BENCH_DB} (PostGIS {postgis[0] if postgis else '?'}): {LAYER}, {points}"
        f" random points over {region} (made in {time.perf_counter() - t0:.1f} s)"
    )
    return url, about


def probe_rows(pg: str, count: int) -> dict[int, tuple[float, float, str]]:
    """The probes' rows: where each is and its name."""
    with psycopg.connect(f"{pg}/{BENCH_DB}", connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT id, ST_X(geom), ST_Y(geom), name FROM public.watch_points WHERE id <= %s",
            (count,),
        ).fetchall()
    return {int(i): (float(x), float(y), str(name)) for i, x, y, name in rows}


NEWEST_CHANGE = (
    "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM mapsvc_watch.changes_id_seq"
)


# --- tiles and their content -------------------------------------------------------------------


def region_tiles(region: Region, minzoom: int, maxzoom: int) -> list[Tile]:
    return [(t.z, t.x, t.y) for t in TMS.tiles(*region, zooms=list(range(minzoom, maxzoom + 1)))]


def tile_at(lon: float, lat: float, z: int) -> Tile:
    t = TMS.tile(lon, lat, z)
    return t.z, t.x, t.y


def tile_path(tile: Tile) -> str:
    z, x, y = tile
    return f"/api-user/vtile/{LAYER}/{z}/{x}/{y}.pbf"


def mvt_strings(data: bytes) -> set[str]:
    """The string values of a Mapbox Vector Tile's layers (the properties of the features it
    holds: ST_AsMVT lists only the values its features use); a bare protobuf walk."""
    found: set[str] = set()
    for number, first, last in _fields(data, 0, len(data)):
        if number != 3:  # Tile.layers
            continue
        for inner, a, b in _fields(data, first, last):
            if inner != 4:  # Layer.values
                continue
            for kind, c, d in _fields(data, a, b):
                if kind == 1:  # Value.string_value
                    found.add(data[c:d].decode("utf-8", "replace"))
    return found


def answer_strings(status: int, body: bytes) -> set[str] | None:
    """The string values of a tile's answer; None when the answer is no tile (an error)."""
    if status == 204:
        return set()
    if status != 200:
        return None
    return mvt_strings(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank percentile (an infinite value is a probe never fresh)."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the measurement ---------------------------------------------------------------------------


@dataclass
class Writes:
    """What the writers committed."""

    commits: int = 0
    commit_ms: list[float] = field(default_factory=list)
    late_ms: float = 0.0  # the most a statement went after its slot
    seconds: float = 0.0


@dataclass
class Probe:
    """One probe: a row moved, and when the front showed it."""

    number: int
    row: int
    old: Tile
    new: Tile
    kept: bool  # both tiles came from the front's cache just before the commit
    commit_ms: float
    new_s: float | None = None  # from sending the statement to the new tile showing the row
    old_s: float | None = None  # … to the old tile no longer showing it
    polls: int = 0
    refused: Counter[int] = field(default_factory=Counter)  # answers that were no tile
    stale_again: bool = False

    @property
    def staleness(self) -> float:
        if self.new_s is None or self.old_s is None:
            return math.inf
        return max(self.new_s, self.old_s)


@dataclass
class Run:
    """What one measurement gave."""

    writes: Writes
    probes: list[Probe]
    skipped: Counter[str]
    lag: list[int]
    seconds: float


@dataclass
class Plan:
    """What the measurement is asked to do."""

    pg: str
    redis: str
    front_port: int
    region: Region
    points: int
    rows: dict[int, tuple[float, float, str]]
    args: argparse.Namespace


async def _read(conn: HttpConnection, path: str) -> tuple[int, dict[str, str], bytes]:
    """A tile through the front; a connection that failed is opened again, once."""
    try:
        return await asyncio.wait_for(conn.get(path), 30)
    except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
        conn.close()
        return await asyncio.wait_for(conn.get(path), 30)


async def _poll(
    conn: HttpConnection,
    tile: Tile,
    fresh: Callable[[set[str]], bool],
    sent: float,
    plan: Plan,
    probe: Probe,
) -> float | None:
    """Read ``tile`` every poll interval until ``fresh`` holds for its strings: the seconds
    from ``sent`` to the answer that showed it; None past the probe's timeout."""
    interval, timeout = plan.args.poll_ms / 1000, plan.args.probe_timeout_s
    path = tile_path(tile)
    while True:
        asked = time.monotonic()
        if asked - sent > timeout:
            return None
        try:
            status, _, body = await asyncio.wait_for(conn.get(path), timeout)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
            conn.close()
            probe.refused[0] += 1
            status, body = 0, b""
        answered = time.monotonic()
        probe.polls += 1
        strings = answer_strings(status, body)
        if strings is None:
            probe.refused[status] += 1
        elif fresh(strings):
            return answered - sent
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - asked)))


class Measurement:
    """The writers, the probes and the follower's lag, for one run."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.args = plan.args
        self.rng = random.Random(self.args.seed)
        self.rows = dict(plan.rows)
        self.free = set(self.rows)
        self.writes = Writes()
        self.probes: list[Probe] = []
        self.skipped: Counter[str] = Counter()
        self.lag: list[int] = []
        self.stop = asyncio.Event()
        self.dsn = f"{plan.pg}/{BENCH_DB}"

    def place(self) -> tuple[float, float]:
        west, south, east, north = self.plan.region
        return self.rng.uniform(west, east), self.rng.uniform(south, north)

    async def writer(self, slots: itertools.count[int], t0: float, probe_every: int) -> None:
        """Commit the writers' share of the slots (every ``probe_every``-th is a probe's)."""
        first, last = len(self.rows) + 1, self.plan.points
        async with await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, connect_timeout=5
        ) as conn:
            while not self.stop.is_set():
                i = next(slots)
                if probe_every and i % probe_every == 0:
                    continue  # a probe's slot
                at = t0 + i / self.args.rate
                if (wait := at - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                if self.stop.is_set():
                    return
                lon, lat = self.place()
                sent = time.monotonic()
                self.writes.late_ms = max(self.writes.late_ms, (sent - at) * 1000)
                await conn.execute(
                    "UPDATE public.watch_points SET geom = ST_SetSRID(ST_MakePoint(%s, %s), 4326)"
                    " WHERE id = %s",
                    (lon, lat, self.rng.randint(first, last)),
                )
                self.writes.commit_ms.append((time.monotonic() - sent) * 1000)
                self.writes.commits += 1

    async def probe(self, number: int, db: asyncio.Queue[psycopg.AsyncConnection[Any]]) -> None:
        """Move a probe row and wait until the front shows it where it went, and not where it
        was (see the module's notes)."""
        if not self.free:
            self.skipped["no probe row free"] += 1
            return
        row = self.rng.choice(sorted(self.free))
        self.free.discard(row)
        z = self.args.probe_zoom
        lon, lat, name = self.rows[row]
        old = tile_at(lon, lat, z)
        while True:
            to = self.place()
            new = tile_at(*to, z)
            if max(abs(new[1] - old[1]), abs(new[2] - old[2])) >= 2:  # no buffer shared
                break
        token = f"probe {number} row {row} {self.rng.getrandbits(32):08x}"

        def arrived(strings: set[str]) -> bool:  # the new tile shows the row
            return token in strings

        def gone(strings: set[str]) -> bool:  # the old tile no longer does
            return name not in strings

        host, port = "127.0.0.1", self.plan.front_port
        at_old, at_new = HttpConnection(host, port, GZIP), HttpConnection(host, port, GZIP)
        try:
            kept, shown = True, False
            for conn, tile in ((at_old, old), (at_new, new)):
                status, headers, body = await _read(conn, tile_path(tile))
                if "x-request-id" in headers:  # the API answered: the front keeps it now
                    status, headers, body = await _read(conn, tile_path(tile))
                    kept = kept and "x-request-id" not in headers
                if tile == old:
                    shown = name in (answer_strings(status, body) or set())
            if not shown:
                self.skipped["the old tile did not show the row before the commit"] += 1
                self.free.add(row)
                return
            conn_db = await db.get()
            try:
                sent = time.monotonic()
                await conn_db.execute(
                    "UPDATE public.watch_points SET geom = ST_SetSRID(ST_MakePoint(%s, %s), 4326),"
                    " name = %s WHERE id = %s",
                    (*to, token, row),
                )
                commit_ms = (time.monotonic() - sent) * 1000
            finally:
                db.put_nowait(conn_db)
            self.rows[row] = (*to, token)
            self.writes.commits += 1
            self.writes.commit_ms.append(commit_ms)
            probe = Probe(number, row, old, new, kept, commit_ms)
            self.probes.append(probe)
            probe.new_s, probe.old_s = await asyncio.gather(
                _poll(at_new, new, arrived, sent, self.plan, probe),
                _poll(at_old, old, gone, sent, self.plan, probe),
            )
            if probe.staleness == math.inf:
                return  # its row stays out of the probes' pool: its state is not known
            await asyncio.sleep(self.args.recheck_s)
            for conn, tile, fresh in (
                (at_new, new, arrived),
                (at_old, old, gone),
            ):
                status, _, body = await _read(conn, tile_path(tile))
                strings = answer_strings(status, body)
                if strings is not None and not fresh(strings):
                    probe.stale_again = True
            self.free.add(row)
        finally:
            at_old.close()
            at_new.close()

    async def follow_lag(self) -> None:
        """The changes logged that the follower has not expired yet, every quarter second."""
        client = aioredis.Redis.from_url(self.plan.redis, decode_responses=True)
        try:
            async with await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, connect_timeout=5
            ) as conn:
                while not self.stop.is_set():
                    row = await (await conn.execute(NEWEST_CHANGE)).fetchone()
                    position = int(await client.get(POSITION_KEY) or 0)
                    self.lag.append(max(0, (int(row[0]) if row else 0) - position))
                    await asyncio.sleep(0.25)
        finally:
            await client.aclose()

    async def run(self) -> Run:
        args = self.args
        probe_every = max(1, round(args.rate / args.probe_rate)) if args.probe_rate else 0
        db: asyncio.Queue[psycopg.AsyncConnection[Any]] = asyncio.Queue()
        for _ in range(2):
            db.put_nowait(
                await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, connect_timeout=5)
            )
        slots = itertools.count()
        t0 = time.monotonic()
        background = [
            asyncio.create_task(self.writer(slots, t0, probe_every)) for _ in range(args.writers)
        ]
        background.append(asyncio.create_task(self.follow_lag()))
        probes: list[asyncio.Task[None]] = []
        try:
            if probe_every:
                for k in itertools.count():
                    at = t0 + k * probe_every / args.rate
                    if at - t0 >= args.seconds:
                        break
                    await asyncio.sleep(max(0.0, at - time.monotonic()))
                    probes.append(asyncio.create_task(self.probe(k, db)))
                    for task in background:  # a writer that failed stops the run
                        if task.done():
                            task.result()
            else:
                await asyncio.sleep(args.seconds)
            await asyncio.gather(*probes)
        finally:
            self.stop.set()
            seconds = time.monotonic() - t0
            for task in probes:
                task.cancel()
            await asyncio.gather(*background, *probes, return_exceptions=True)
            for task in background:
                if not task.cancelled() and task.exception() is not None:
                    raise RuntimeError("a writer failed") from task.exception()
            while not db.empty():
                await db.get_nowait().close()
        self.writes.seconds = seconds
        return Run(self.writes, self.probes, self.skipped, self.lag, seconds)


# --- the service -------------------------------------------------------------------------------


def start_wrk(
    stack: ExitStack, work: Path, base: str, paths: Sequence[str], args: argparse.Namespace
) -> Server:
    """wrk reading ``paths`` through the front until interrupted (SIGINT: it prints its
    figures and counted.lua's lines)."""
    urls, lua = work / "wrk-urls.txt", work / "wrk-cycle.lua"
    urls.write_text("\n".join(paths) + "\n")
    lua.write_text(_CYCLE_LUA.format(counted=COUNTED_LUA))
    argv = ["wrk", f"-t{args.wrk_threads}", f"-c{args.concurrency}", "-d3600s", "--latency"]
    argv += ["--timeout=10s", "-H", "Accept-Encoding: gzip", "-s", str(lua), base, "--", str(urls)]
    argv.append(str(args.wrk_threads))
    return start(stack, "wrk", argv, work / "logs" / "wrk.log", dict(os.environ), work)


def stop_wrk(server: Server) -> str:
    """Interrupt wrk; what it printed."""
    server.check()
    server.popen.send_signal(signal.SIGINT)
    server.popen.wait(timeout=30)
    return server.log.read_text(errors="replace")


def wait_follower(client: httpx.Client, api: str, follower: Server, deadline: Deadline) -> str:
    """The follower's name once it holds its lease (``GET /watches``)."""
    end = time.monotonic() + deadline.left(60)
    while time.monotonic() < end:
        follower.check()
        running = client.get(f"{api}/api-user/watches", timeout=10).json()["follower"]["running"]
        if running:
            return str(running)
        time.sleep(0.2)
    raise TimeoutError("the follower did not take its lease within 60 s:\n" + follower.tail())


def caught_up(pg: str, redis_url: str, follower: Server, limit_s: float) -> float:
    """Wait until the follower expired every change logged; the seconds it took."""
    client = sync_client(redis_url)
    with psycopg.connect(f"{pg}/{BENCH_DB}", autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(NEWEST_CHANGE).fetchone()
    newest, t0 = int(row[0]) if row else 0, time.monotonic()
    while int(client.get(POSITION_KEY) or 0) < newest:
        follower.check()
        if time.monotonic() - t0 > limit_s:
            raise TimeoutError(f"the follower did not catch up within {limit_s:.0f} s")
        time.sleep(0.02)
    client.close()
    return time.monotonic() - t0


def expiries(redis_url: str) -> list[dict[str, Any]]:
    """The follower's ``layer-changed`` lines of the layer (its stream keeps the last ~1,000)."""
    client = sync_client(redis_url)
    lines = []
    for _, fields in client.xrange(layer_stream(LAYER)) or []:
        kind, _, body = str((fields or {}).get("text", "")).partition(" ")
        if kind == "layer-changed":
            lines.append(json.loads(body))
    client.close()
    return lines


# --- the report --------------------------------------------------------------------------------


def spread(values: Sequence[float], unit: str, digits: int = 2) -> str:
    if not values:
        return "none"
    cuts = [percentile(values, p) for p in (50, 95)]
    text = f"p50 {cuts[0]:.{digits}f}, p95 {cuts[1]:.{digits}f}, max {max(values):.{digits}f}"
    return f"{text} {unit}" if unit else text


def report(
    run: Run,
    wrk_out: str,
    batches: list[dict[str, Any]],
    follower_cpu: float,
    settle_s: float,
    args: argparse.Namespace,
) -> float:
    """Print the results; the probes' p95 staleness (s)."""
    wrk = parse_wrk(wrk_out)
    wrk_s = float(wrk.summary["seconds"])
    tiles = sum(n for status, n in wrk.statuses.items() if status in ("200", "204", "304"))
    others = {s: n for s, n in wrk.statuses.items() if s not in ("200", "204", "304")}
    errors = {k: v for k in ("connect", "read", "write", "timeout") if (v := wrk.summary[k]) != "0"}
    write_rate = run.writes.commits / run.writes.seconds
    probes = run.probes
    staleness = [p.staleness for p in probes]
    fresh = [s for s in staleness if s != math.inf]
    print(
        f"\n=== results: {LAYER} watched, through the front; wrk -t{args.wrk_threads}"
        f" -c{args.concurrency} over the tiles z{args.zooms}; {args.rate:g}"
        f" rows/s asked over {args.writers} + 2 connections; probes at z{args.probe_zoom},"
        f" {args.probe_rate:g}/s for {args.seconds:g} s, polled every {args.poll_ms:g} ms ==="
    )
    print("load")
    print(
        f"  {'writes':22} {run.writes.commits} commits in {run.writes.seconds:.1f} s:"
        f" {write_rate:.1f} rows/s (asked {args.rate:g}); statement+COMMIT"
        f" {spread(run.writes.commit_ms, 'ms', 1)}; latest start {run.writes.late_ms:.0f} ms"
        " after its slot"
    )
    statuses = ", ".join(f"{s}: {n}" for s, n in sorted(wrk.statuses.items()))
    print(
        f"  {'tile reads (wrk)':22} {tiles} tiles in {wrk_s:.1f} s: {tiles / wrk_s:.0f} tiles/s"
        f" ({statuses}); p50 {wrk.summary['p50_ms']} ms, p99 {wrk.summary['p99_ms']} ms"
        + (f"; NOT tiles: {others}" if others else "")
        + (f"; socket errors {errors}" if errors else "")
    )
    changes = [int(b["changes"]) for b in batches]
    print(
        f"  {'follower':22} {len(batches)} expiries announced ({sum(changes)} changes, median"
        f" {statistics.median(changes) if changes else 0:g} a batch); tiles dropped a batch:"
        f" {spread([float(b['tiles']) for b in batches], '', 0)}; seconds an expiry:"
        f" {spread([float(b['seconds']) for b in batches], 's', 3)}"
    )
    print(
        f"  {'':22} lag behind the log (every 0.25 s):"
        f" {spread(list(map(float, run.lag)), 'changes', 0)};"
        f" CPU {follower_cpu:.1f} s in {run.seconds:.1f} s"
        f" ({follower_cpu / run.seconds:.0%} of a core); settle re-expiry after {settle_s:g} s"
    )
    if write_rate < 0.95 * args.rate:
        print(f"  WARNING: {write_rate:.0f} rows/s written, not the {args.rate:g} asked")
    print(
        "\nstaleness: from sending the UPDATE to the front's answers showing it"
        f" (z{args.probe_zoom})"
    )
    kept = sum(p.kept for p in probes)
    print(
        f"  {'probes':22} {len(probes)} ({kept} with both tiles kept by the front before the"
        f" commit); skipped: {dict(run.skipped) or 'none'}"
    )
    print(f"  {'new tile shows the row':22} {spread([p.new_s for p in probes if p.new_s], 's')}")
    print(f"  {'old tile no longer':22} {spread([p.old_s for p in probes if p.old_s], 's')}")
    if probes:
        p50, p95 = percentile(staleness, 50), percentile(staleness, 95)
        print(
            f"  {'both (the staleness)':22} p50 {p50:.2f}, p95 {p95:.2f}, max {max(staleness):.2f}"
            f" s; never fresh within {args.probe_timeout_s:g} s: {len(staleness) - len(fresh)}"
        )
    else:
        p95 = math.inf
    refused = sum((p.refused for p in probes), Counter[int]())
    print(
        f"  {'polls':22} {sum(p.polls for p in probes)} (answers that were no tile:"
        f" {dict(refused) or 'none'}); stale again {args.recheck_s:g} s after fresh:"
        f" {sum(p.stale_again for p in probes)}"
    )
    print("\ngoal (issue 35):")
    summary_line(
        f"watch load: {write_rate:.0f} rows/s written (asked {args.rate:g}), {tiles / wrk_s:.0f}"
        f" tiles/s read through the front, {len(probes)} probes"
    )
    goal("staleness COMMIT -> fresh tile via the front, p95", p95, 2.0, "s", at_most=True)
    return p95


# --- the run -----------------------------------------------------------------------------------


def numbers(text: str, count: int) -> list[float]:
    values = [float(v) for v in re.split(r"[,\s]+", text.strip()) if v]
    if len(values) != count:
        raise SystemExit(f"{text!r}: {count} numbers expected")
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30, help="probes are started for this")
    parser.add_argument("--rate", type=float, default=200, help="rows committed a second in all")
    parser.add_argument("--probe-rate", type=float, default=5, help="of those, probes a second")
    parser.add_argument("--probe-zoom", type=int, default=12, help="zoom of the probes' tiles")
    parser.add_argument("--poll-ms", type=float, default=50, help="a probe's reads, apart")
    parser.add_argument("--probe-timeout-s", type=float, default=30, help="never fresh past it")
    parser.add_argument("--recheck-s", type=float, default=2, help="read again after fresh")
    parser.add_argument("--concurrency", type=int, default=16, help="wrk's connections")
    parser.add_argument("--wrk-threads", type=int, default=2, help="wrk's threads")
    parser.add_argument("--writers", type=int, default=4, help="the writers' connections")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn processes of the API")
    parser.add_argument("--points", type=int, default=100_000, help="rows of the table")
    parser.add_argument("--probe-rows", type=int, default=100, help="rows only probes move")
    parser.add_argument("--region", default="6,45,10,48", help="west,south,east,north (deg)")
    parser.add_argument("--zooms", default="10-12", help="zooms of the tiles wrk reads")
    parser.add_argument("--front-ttl-s", type=int, default=600, help="MAPSVC_FRONT_VTILE_TTL_S")
    parser.add_argument("--seed", type=int, default=35, help="of the data and the writers")
    add_load_run_arguments(parser, redis="redis://127.0.0.1:6379/5")
    args = parser.parse_args()
    if not 0 <= args.probe_rate <= args.rate:
        parser.error("--probe-rate: between 0 and --rate")
    if args.probe_rows >= args.points:
        parser.error("--probe-rows: fewer than --points")
    region: Region = tuple(numbers(args.region, 4))  # type: ignore[assignment]
    low, _, high = args.zooms.partition("-")
    minzoom, maxzoom = int(low), int(high or low)
    pg, deadline = begin_load_run(args)
    check_flushable(args.redis)

    with ExitStack() as stack, httpx.Client(timeout=60) as anonymous:
        work = scratch(stack, "bench-watch", pg, BENCH_DB, args.keep)
        work.chmod(0o755)  # started as root, nginx's workers run unprivileged: they must pass it
        rdb = sync_client(args.redis)
        rdb.flushdb()
        if not args.keep:
            stack.callback(rdb.flushdb)  # after the servers stopped
        print(f"load average (1, 5, 15 min) at the start: {load_average()}")
        db_url, about_db = make_db(pg, args.points, region, args.seed / 100)
        rows = probe_rows(pg, args.probe_rows)
        key, backend = admin_key(), free_port()
        env, settings = service_settings(
            key,
            work,
            MAPSVC_HOST="127.0.0.1",
            MAPSVC_BACKEND_PORT=str(backend),
            MAPSVC_API_WORKERS=str(args.workers),
            MAPSVC_ALLOWED_HOSTS="127.0.0.1,localhost",
            MAPSVC_DATABASE_URL=db_url,
            MAPSVC_REDIS_URL=args.redis,
            MAPSVC_PUBLIC_LAYERS=LAYER,
            MAPSVC_FRONT="nginx",
            MAPSVC_FRONT_VTILE_TTL_S=str(args.front_ttl_s),
            MAPSVC_DB_STATEMENTS_PER_CALLER="64",
        )
        logs = work / "logs"
        api = start(
            stack, "api", serve_argv(settings, behind_front=True), logs / "api.log", env, ROOT
        )
        api_base = f"http://127.0.0.1:{backend}"
        client = stack.enter_context(
            httpx.Client(timeout=60, headers={"Authorization": f"Bearer {key}"})
        )
        wait_http(client, f"{api_base}/api-user/health", [api], deadline, 120)
        conf = write_front_config(settings, f"127.0.0.1:{backend}")
        front = start(stack, "front", front_argv(conf), logs / "front.log", env, ROOT)
        front_base = f"http://127.0.0.1:{settings.port}"
        wait_http(anonymous, f"{front_base}/api-user/health", [front, api], deadline, 30)
        watched = client.put(f"{api_base}/api-user/watches/{LAYER}")
        if watched.status_code != 200:
            raise RuntimeError(f"watching {LAYER}: {watched.status_code} {watched.text[:300]}")
        follower = start(stack, "follower", follower_argv(), logs / "follower.log", env, ROOT)
        name = wait_follower(client, api_base, follower, deadline)
        servers = [api, front, follower]

        tiles = region_tiles(region, minzoom, maxzoom)
        random.Random(args.seed).shuffle(tiles)  # every zoom in every stretch of the cycle
        zooms = Counter(z for z, _, _ in tiles)
        paths = [tile_path(t) for t in tiles]
        print(about_db)
        print(
            f"service: API `uvicorn --workers {args.workers}` behind the nginx front (vector"
            f" tiles of the public layer kept {args.front_ttl_s} s), follower {name};"
            f" Redis {args.redis}; {os.cpu_count()} CPUs"
        )
        print(
            f"tiles read: {len(tiles)} ("
            + ", ".join(f"z{z}: {n}" for z, n in sorted(zooms.items()))
            + "); filling the caches through the front ...",
            flush=True,
        )
        filled = http_pass([front_base + p for p in paths], args.concurrency, deadline)
        bad = {k: n for k, n in filled.answers.items() if not k.startswith(("200 ", "204 "))}
        if bad:
            raise RuntimeError(f"filling the caches: answers that are no tile: {bad}")
        sample = [
            anonymous.get(front_base + p, headers={"Accept-Encoding": "gzip"}) for p in paths[:20]
        ]
        if any("x-request-id" in r.headers for r in sample):
            raise RuntimeError(
                "the front does not keep the layer's tiles (answers come from the API): see"
                f" {front.log} and {conf.parent / 'nginx-error.log'}"
            )
        print(
            f"filled in {filled.seconds:.1f} s ({filled.rate:.0f} tiles/s, X-Cache:"
            f" {dict(filled.cache)}); caught up: {caught_up(pg, args.redis, follower, 30):.2f} s"
        )
        print(f"load average (1, 5, 15 min) before measuring: {load_average()}", flush=True)

        wrk = start_wrk(stack, work, front_base, paths, args)
        cpu0 = cpu_s(follower.popen.pid)
        plan = Plan(pg, args.redis, settings.port, region, args.points, rows, args)
        print(
            f"measuring: wrk at full speed, {args.rate:g} rows/s written, {args.probe_rate:g}"
            f" probes/s for {args.seconds:g} s ...",
            flush=True,
        )
        run: Run = run_async(lambda: Measurement(plan).run(), deadline)
        follower_cpu = cpu_s(follower.popen.pid) - cpu0
        wrk_out = stop_wrk(wrk)
        for server in servers:
            server.check()
        catch_up_s = caught_up(pg, args.redis, follower, 60)
        batches = expiries(args.redis)
        report(run, wrk_out, batches, follower_cpu, settings.vector.watch_settle_s, args)
        print(f"\nthe follower caught up {catch_up_s:.2f} s after the writes stopped")
        print(f"load average (1, 5, 15 min) at the end: {load_average()}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
