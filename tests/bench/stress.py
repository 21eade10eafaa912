"""Stress: under hostile load the ordinary requests still answer within 5 s and none is a 500.

Run from the checkout with ``make stress`` (or ``.venv/bin/python -m tests.bench.stress``);
Redis and PostgreSQL with PostGIS must be running and ``wrk`` installed (``bash
deploy/services.sh --test-tools``). In one run:

- the service runs as ``make run`` runs it (the API, ``mapsvc serve``, and a worker, started as
  the tile benchmark starts them) on a work dir, a Redis db (flushed first) and a database of its
  own: ``mapsvc_stress``, made afresh with PostGIS, the countries and ``public.stress_points``
  (points with a long text each, so that one GeoJSON answer is megabytes), dropped at the end;
  its raster layer is the tile benchmark's COG of the Landsat scene; every request (the load's
  and the probes') carries the run's random admin key (``MAPSVC_ADMIN_API_KEY``), and the
  service's quotas are set out of reach, so that the load meets the render pool, not a quota;
- the load, for a short ramp and then ``--duration-s``: ``wrk`` with 200 connections asking BBOX
  renders of 4096 x 4096 px (``stress_bbox.lua``, which counts the answers by status); 150 SSE
  streams on ``/events`` held open; 12 slow readers of the GeoJSON of ``public.stress_points``
  (``nocache=1``), each with a 4 KiB receive buffer, reading 16 bytes a second. A held
  connection that ends or is refused is opened again a second later;
- every second, each on a new connection: a cached tile, the same tile with ``nocache=1``, a
  GeoJSON page (``limit=10``, ``nocache=1``) and ``/ready``.

Verdicts (issue 10): every probe answers within 5 s; no answer at all is a 5xx other than 503
(a ``503`` with ``Retry-After`` is how the service sheds load). Exit status 1 when one fails.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import socket
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

import httpx
import rasterio
from rasterio.crs import CRS
from rasterio.warp import transform_bounds
from sqlalchemy import create_engine, text

from shared.demo import DEMO_DATA, load_countries
from tests.bench._harness import (
    Deadline,
    HttpConnection,
    Server,
    Wrk,
    add_load_run_arguments,
    admin_key,
    auth_headers,
    auth_lines,
    begin_load_run,
    fresh_database,
    load_average,
    parse_wrk,
    scratch,
    sqlalchemy_url,
    wait_http,
    wrk_headers,
)
from tests.bench.bench_tiles import configure_layer, make_cog, scene_tiles, start_mapsvc, url_of
from tests.bench.bench_vector import verdict

ROOT = Path(__file__).resolve().parents[2]
LUA = Path(__file__).with_name("stress_bbox.lua")
STRESS_DB = "mapsvc_stress"
COUNTRIES, POINTS = "public.countries", "public.stress_points"
PROBE_LIMIT_S = 5.0  # the bound for every probe
SLOW_BYTES_PER_S, SLOW_RCVBUF = 16, 4096


# --- the database ------------------------------------------------------------------------------


def make_stress_db(pg: str, points: int) -> str:
    """The stress database made afresh: countries, and points with a 512-character note each."""
    engine = create_engine(fresh_database(pg, STRESS_DB))
    try:
        countries = load_countries(engine, DEMO_DATA)  # also creates the postgis extension
        with engine.begin() as conn:
            conn.execute(
                text(
                    "CREATE TABLE public.stress_points (id integer PRIMARY KEY, name text NOT NULL,"
                    " note text NOT NULL, geom geometry(Point, 4326) NOT NULL)"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO public.stress_points SELECT i, 'point ' || i,"
                    " repeat(md5(i::text), 16),"
                    " ST_SetSRID(ST_MakePoint(mod(i * 7919, 360) - 180,"
                    " mod(i * 104729, 170) - 85), 4326)"
                    " FROM generate_series(1, :n) AS i"
                ),
                {"n": points},
            )
            conn.execute(text("ANALYZE public.stress_points"))
    finally:
        engine.dispose()
    return f"database {STRESS_DB}: {COUNTRIES} {countries} rows, {POINTS} {points} rows"


# --- the load ----------------------------------------------------------------------------------


@dataclass
class Held:
    """Connections the load holds open: their answers by status, how many are open."""

    name: str
    statuses: Counter[str] = field(default_factory=Counter)
    open: int = 0
    most_open: int = 0
    ended: int = 0  # answers the server ended while the load ran
    received: int = 0  # bytes


def request_bytes(host: str, port: int, target: str, auth: str, accept: str = "*/*") -> bytes:
    """A GET of ``target`` on a connection of its own; ``auth``: the credentials' header line."""
    return (
        f"GET {target} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: {accept}\r\n{auth}"
        "Connection: close\r\n\r\n"
    ).encode()


async def read_status(sock: socket.socket, chunk: int, pause_s: float) -> tuple[str, int]:
    """The status of the answer (or ``closed``), read ``chunk`` bytes at a time; bytes read."""
    loop = asyncio.get_running_loop()
    head = b""
    while b"\r\n" not in head:
        data = await loop.sock_recv(sock, chunk)
        if not data:
            return "closed", len(head)
        head += data
        await asyncio.sleep(pause_s)
    parts = head.split(b" ", 2)
    return (parts[1].decode("latin-1") if len(parts) > 1 else "malformed"), len(head)


async def hold(
    address: tuple[str, int],
    request: bytes,
    held: Held,
    chunk: int,
    pause_s: float = 0.0,
    rcvbuf: int | None = None,
) -> None:
    """Ask ``request`` and read its answer ``chunk`` bytes every ``pause_s``, again and again.

    Runs until cancelled; a connection that ends or fails is opened again a second later.
    """
    loop = asyncio.get_running_loop()
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connecting, so that the window stays small
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        counted = False
        try:
            await loop.sock_connect(sock, address)
            await loop.sock_sendall(sock, request)
            status, size = await read_status(sock, chunk, pause_s)
            held.statuses[status] += 1
            held.received += size
            if status == "200":
                held.open += 1
                held.most_open = max(held.most_open, held.open)
                counted = True
            while data := await loop.sock_recv(sock, chunk):
                held.received += len(data)
                await asyncio.sleep(pause_s)
            if counted:
                held.ended += 1
        except OSError as exc:
            held.statuses[type(exc).__name__] += 1
        finally:
            sock.close()
            if counted:
                held.open -= 1
        await asyncio.sleep(1.0)


async def start_wrk(
    base: str,
    path: str,
    bbox: Sequence[float],
    args: argparse.Namespace,
    seconds: float,
    key: str,
) -> asyncio.subprocess.Process:
    """wrk asking BBOX renders of ``path`` for ``seconds`` (its output on its stdout).

    Every request carries ``key`` (wrk's ``-H``, which ``wrk.format`` in the script adds).
    """
    argv = ["wrk", f"-t{min(args.renders, os.cpu_count() or 1)}", f"-c{args.renders}"]
    argv += [f"-d{math.ceil(seconds)}s", f"--timeout={args.wrk_timeout_s:g}s", "-s", str(LUA)]
    argv += wrk_headers(key)
    argv += [base, "--", path, *(f"{v:.2f}" for v in bbox), str(args.size)]
    return await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )


# --- the probes --------------------------------------------------------------------------------


class Ask(NamedTuple):
    at_s: float  # since the probes started
    seconds: float
    outcome: str  # the status, or the name of the error

    @property
    def late(self) -> bool:
        """Not answered (an error), or answered in ``PROBE_LIMIT_S`` or more."""
        return self.seconds >= PROBE_LIMIT_S or not self.outcome.isdigit()


@dataclass
class Probe:
    """An ordinary request asked every second under load."""

    name: str
    target: str
    asks: list[Ask] = field(default_factory=list)

    def seconds(self) -> list[float]:
        return sorted(a.seconds for a in self.asks)

    def outcomes(self) -> Counter[str]:
        return Counter(a.outcome for a in self.asks)

    def late(self) -> list[Ask]:
        return sorted(a for a in self.asks if a.late)


async def ask(
    probe: Probe, address: tuple[str, int], start: float, timeout_s: float, auth: str
) -> None:
    """One GET of the probe on a new connection: its status or the name of its error, timed.

    ``auth``: the credentials' header line.
    """
    t0 = time.monotonic()
    connection = HttpConnection(*address, auth)
    try:
        status, _, _ = await asyncio.wait_for(connection.get(probe.target), timeout_s)
        outcome = str(status)
    except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
        outcome = type(exc).__name__
    finally:
        connection.close()
    probe.asks.append(Ask(t0 - start, time.monotonic() - t0, outcome))


async def probe_every_second(
    probe: Probe, address: tuple[str, int], seconds: float, timeout_s: float, auth: str
) -> None:
    """An ask a second for ``seconds``, each on its own (a slow answer delays no later ask)."""
    start = time.monotonic()
    asks = []
    for i in range(math.ceil(seconds)):
        await asyncio.sleep(max(0.0, start + i - time.monotonic()))
        asks.append(asyncio.create_task(ask(probe, address, start, timeout_s, auth)))
    await asyncio.gather(*asks)


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Targets:
    """What the load and the probes ask."""

    bbox_path: str
    bbox: tuple[float, float, float, float]  # the scene in EPSG:3857
    probes: list[Probe]
    sse: str
    slow: str


@dataclass
class Outcome:
    wrk: Wrk
    held: list[Held]
    open_at_end: list[int]


async def under_load(
    base: str, targets: Targets, args: argparse.Namespace, deadline: Deadline, key: str
) -> Outcome:
    """The load for the ramp and the probes' duration; the probes fill ``targets.probes``.

    Every request carries ``key``, the service's admin key.
    """
    parts = urlsplit(base)
    address = (parts.hostname or "127.0.0.1", parts.port or 80)
    streams = Held(f"SSE streams on /events ({args.streams} held)")
    readers = Held(f"slow GeoJSON readers ({args.slow_readers}, {SLOW_BYTES_PER_S} B/s)")
    auth = auth_lines(key)
    sse_request = request_bytes(*address, targets.sse, auth, "text/event-stream")
    slow_request = request_bytes(*address, targets.slow, auth)
    wrk = await start_wrk(
        base, targets.bbox_path, targets.bbox, args, args.ramp_s + args.duration_s, key
    )
    load = [
        asyncio.create_task(hold(address, sse_request, streams, 4096)) for _ in range(args.streams)
    ]
    load += [
        asyncio.create_task(
            hold(address, slow_request, readers, SLOW_BYTES_PER_S, 1.0, SLOW_RCVBUF)
        )
        for _ in range(args.slow_readers)
    ]
    try:
        await asyncio.sleep(args.ramp_s)
        print(
            f"load on: {streams.open} SSE streams and {readers.open} slow readers open;"
            f" probing every second for {args.duration_s:g} s ...",
            flush=True,
        )
        await asyncio.gather(
            *(
                probe_every_second(p, address, args.duration_s, args.probe_timeout_s, auth)
                for p in targets.probes
            )
        )
        open_at_end = [streams.open, readers.open]
    except BaseException:
        wrk.kill()
        raise
    finally:
        for task in load:
            task.cancel()
        await asyncio.gather(*load, return_exceptions=True)
    output, _ = await asyncio.wait_for(wrk.communicate(), deadline.left(args.wrk_timeout_s + 60))
    return Outcome(parse_wrk(output.decode(errors="replace")), [streams, readers], open_at_end)


def make_targets(api: str, config: dict[str, object], cog: Path) -> Targets:
    """The probes' requests (the tile warmed up by the caller) and the load's."""
    prefix = urlsplit(api).path
    layer = str(config["layer"])
    tiles = scene_tiles(cog, 12, 12)
    tile = url_of(str(config["url"]), tiles[len(tiles) // 2])
    with rasterio.open(cog) as src:
        bbox = transform_bounds(src.crs, CRS.from_epsg(3857), *src.bounds)
    probes = [
        Probe("tile, cached (256 px)", tile),
        Probe("tile, uncached (nocache=1)", f"{tile}?nocache=1"),
        Probe(
            "GeoJSON page (limit=10, nocache=1)", f"{prefix}/geojson/{COUNTRIES}?limit=10&nocache=1"
        ),
        Probe("/ready", f"{prefix}/ready"),
    ]
    return Targets(
        bbox_path=f"{prefix}/rtile/{layer}/0/0/0.png",
        bbox=bbox,
        probes=probes,
        sse=f"{prefix}/events",
        slow=f"{prefix}/geojson/{POINTS}?nocache=1",
    )


def warm_up(
    client: httpx.Client, origin: str, targets: Targets, servers: list[Server], deadline: Deadline
) -> None:
    """Every probe answering (the tile is cached from then on), and the slow readers' layer."""
    for target in [*(p.target for p in targets.probes), f"{targets.slow}&limit=1"]:
        wait_http(client, origin + target, servers, deadline, 120)


def recovery(client: httpx.Client, url: str, servers: list[Server], deadline: Deadline) -> str:
    """How long ``url`` takes to answer 200 once the load stopped (at most two minutes)."""
    t0 = time.monotonic()
    try:
        wait_http(client, url, servers, deadline, 120)
    except TimeoutError:
        return "no 200 within 120 s"
    return f"200 after {time.monotonic() - t0:.1f} s"


# --- the report --------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank: the smallest value with at least ``q`` of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def counts(counter: Counter[str]) -> str:
    return ", ".join(f"{key} x {n}" for key, n in sorted(counter.items())) or "none"


def spans(seconds: Iterable[int]) -> str:
    """``0-3, 7, 9-10`` for 0, 1, 2, 3, 7, 9, 10."""
    runs: list[list[int]] = []
    for second in sorted(set(seconds)):
        if runs and second == runs[-1][1] + 1:
            runs[-1][1] = second
        else:
            runs.append([second, second])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def print_probes(probes: Sequence[Probe]) -> None:
    print(
        f"{'probe (every second)':36} {'n':>4} {'median s':>9} {'p95 s':>7} {'max s':>7}  answers"
    )
    for p in probes:
        s = p.seconds()
        print(
            f"{p.name:36} {len(s):4d} {percentile(s, 0.5):9.2f} {percentile(s, 0.95):7.2f}"
            f" {s[-1]:7.2f}  {counts(p.outcomes())}"
        )
    for p in probes:
        if late := p.late():
            at = spans(int(a.at_s) for a in late)
            print(f"  {p.name}: {len(late)} late or unanswered, asked at {at} s")


def print_load(outcome: Outcome, args: argparse.Namespace) -> None:
    w = outcome.wrk.summary
    print(
        f"\nBBOX renders of {args.size} px (wrk, {args.renders} connections):"
        f" {w['requests']} answers in {w['seconds']} s: {counts(outcome.wrk.statuses)};"
        f" socket errors: connect {w['connect']}, read {w['read']}, write {w['write']},"
        f" timeout {w['timeout']} (--timeout {args.wrk_timeout_s:g} s);"
        f" latency p50 {w['p50_ms']} ms, p95 {w['p95_ms']} ms, max {w['max_ms']} ms"
    )
    for held, open_at_end in zip(outcome.held, outcome.open_at_end, strict=True):
        print(
            f"{held.name}: answers {counts(held.statuses)}; {held.most_open} open at most,"
            f" {open_at_end} at the end of the probes; {held.ended} ended by the server;"
            f" {held.received / 1e6:.2f} MB read"
        )


def server_errors(servers: Iterable[Server]) -> str:
    """Tracebacks in the servers' logs (a 500 leaves one), with the last one's last line."""
    found = []
    for server in servers:
        lines = server.log.read_text(errors="replace").splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
        if starts:  # the exception is the first line after the last traceback's frames
            after = lines[starts[-1] + 1 :]
            error = next((ln for ln in after if ln and not ln[0].isspace()), "")
            found.append(f"{server.name}: {len(starts)} tracebacks (the last: {error[:200]})")
    return "; ".join(found) or "no traceback in the servers' logs"


def bad_answers(outcome: Outcome, probes: Sequence[Probe]) -> Counter[str]:
    """Every 5xx answer but 503, by where it came from."""
    bad: Counter[str] = Counter()
    sources = [("wrk", outcome.wrk.statuses)]
    sources += [(h.name.split(" (")[0], h.statuses) for h in outcome.held]
    sources += [(p.name, p.outcomes()) for p in probes]
    for where, statuses in sources:
        for status, n in statuses.items():
            if status.isdigit() and 500 <= int(status) < 600 and status != "503":
                bad[f"{status} from {where}"] += n
    return bad


def print_verdicts(outcome: Outcome, probes: Sequence[Probe]) -> bool:
    late = sum(len(p.late()) for p in probes)
    asked = sum(len(p.asks) for p in probes)
    bad = bad_answers(outcome, probes)
    in_time = asked > 0 and late == 0
    print(
        f"\nevery probe answered within {PROBE_LIMIT_S:g} s: {verdict(in_time)}"
        f" ({late} of {asked} late or unanswered)"
    )
    print(f"no 500 (no 5xx but 503): {verdict(not bad)} ({counts(bad)})")
    return in_time and not bad


# --- main --------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--renders", type=int, default=200, help="wrk connections (BBOX renders)")
    parser.add_argument("--size", type=int, default=4096, help="width and height of a render")
    parser.add_argument("--streams", type=int, default=150, help="SSE streams held open")
    parser.add_argument("--slow-readers", type=int, default=12, help="slow GeoJSON readers")
    parser.add_argument("--points", type=int, default=20000, help=f"rows of {POINTS}")
    parser.add_argument("--ramp-s", type=float, default=5.0, help="load before the probes start")
    parser.add_argument("--duration-s", type=float, default=30.0, help="probing under load")
    parser.add_argument("--probe-timeout-s", type=float, default=30.0, help="a probe gives up")
    parser.add_argument("--wrk-timeout-s", type=float, default=30.0, help="wrk's --timeout")
    parser.add_argument("--workers", type=int, default=2, help="render and worker processes")
    parser.add_argument("--api-workers", type=int, default=1, help="API processes")
    add_load_run_arguments(parser, "redis://127.0.0.1:6379/14")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    pg, deadline = begin_load_run(args)
    key = admin_key()
    with ExitStack() as stack, httpx.Client(headers=auth_headers(key)) as client:
        work = scratch(stack, "stress", pg, STRESS_DB, args.keep)  # before the servers start
        logs = work / "logs"
        print(make_stress_db(pg, args.points))
        # start_mapsvc starts the servers with this process's environment
        os.environ["MAPSVC_DATABASE_URL"] = f"{sqlalchemy_url(pg)}/{STRESS_DB}"
        cog, about = make_cog(work)
        servers, api = start_mapsvc(
            stack, work, args.workers, args.redis, args.api_workers, logs, client, deadline, key
        )
        origin = api.removesuffix("/api-user")
        targets = make_targets(api, configure_layer(client, api, deadline), cog)
        warm_up(client, origin, targets, servers, deadline)
        print(f"raster layer: {about}")
        print(
            f"mapsvc: API (MAPSVC_API_WORKERS={args.api_workers}, MAPSVC_RENDER_PROCESSES="
            f"{args.workers} each) + worker -c {args.workers}; Redis {args.redis};"
            f" {os.cpu_count()} CPUs; load average before: {load_average()}"
        )
        if os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1):
            print("WARNING: the machine is busy with other work: every figure will be skewed")
        print(
            f"load: {args.renders} x {args.size} px BBOX renders (wrk), {args.streams} SSE"
            f" streams, {args.slow_readers} slow readers of {POINTS}; ramp {args.ramp_s:g} s"
        )
        outcome = asyncio.run(under_load(origin, targets, args, deadline, key))
        after = {
            p.name: recovery(client, origin + p.target, servers, deadline) for p in targets.probes
        }
        for server in servers:
            server.check()

        print(f"\n=== under load ({args.duration_s:g} s), load average {load_average()} ===")
        print_probes(targets.probes)
        print_load(outcome, args)
        print("after the load: " + "; ".join(f"{k}: {v}" for k, v in after.items()))
        print(server_errors(servers))
        return 0 if print_verdicts(outcome, targets.probes) else 1


if __name__ == "__main__":
    sys.exit(main())
