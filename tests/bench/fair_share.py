"""Fair share: one caller flooding a class of routes leaves another caller's requests their pace.

Run from the checkout with ``make fair-share`` (or ``.venv/bin/python -m
tests.bench.fair_share``); Redis and PostgreSQL with PostGIS must be running and ``wrk``
installed (``bash deploy/services.sh --test-tools``). In one run:

- the service runs as ``make run`` runs it (the API, ``mapsvc serve``, and a worker, started as
  the tile benchmark starts them, and the nginx front before the API, ``mapsvc front``) on a
  work dir, a Redis db (flushed first) and a database of its own: ``mapsvc_fair_share``, made
  afresh with PostGIS and the countries, dropped at the end; its raster layer is the tile
  benchmark's COG of the Landsat scene. Unlike the other scripts' services it keeps its
  **default quotas** (no ``MAPSVC_RATE_*``, no ``MAPSVC_FRONT_RATE_*``/``BURST``/``QUEUE``, no
  per-caller statement limit from the environment): the budgets are part of the protection
  measured. Every request goes through the front: the flood from 127.0.0.1, the second caller
  from 127.0.0.2 (another client address on loopback). The run's
  random admin key (``MAPSVC_ADMIN_API_KEY``) makes the callers' keys (``POST /api-keys``): a
  reader key for each flood (an operator key for job starts, ``/diag/probe``, served with
  ``MAPSVC_DIAG_PROBE``), one reader key for the second caller, and a user whose password the
  auth flood gets wrong;
- for each class of route, in turn, the second caller asks a fixed set of requests one after
  the other on one keep-alive connection, a round every ``--every-s``: a cached tile of the
  layer, a GeoJSON page (``/geojson/public.countries?limit=10``), the layer's TileJSON and
  ``/health``, leaving out the one of the flooded class (the tile for tiles, the page for
  GeoJSON/OGC items, ``/health`` for documents; the TileJSON is in every round). It asks
  them for ``--duration-s`` alone (its idle p99), then for as long again while ``wrk``
  (``--threads``, ``--connections``; ``fair_share.lua``, which counts the answers by status)
  floods the class's route with the flood caller's key, as hard as it can: documents
  (``/openapi.json``), tiles (uncached raster tiles of zooms 8-12 over the scene,
  ``nocache=1``, each connection cycling through them),
  GeoJSON/OGC items with filters (``/ogc/collections/public.countries/items`` with a CQL2
  ``S_INTERSECTS(geom, POLYGON((...)))`` of 180 vertices ``AND pop_est <> -<n>``, ``<n>`` a
  number of its own per request, as OGC items take no ``nocache``), jobs (``/jobs``), job
  starts (``/diag/probe``), providers (``/geocode?q=Kyiv``; no provider is configured, so it
  answers what an unconfigured provider answers), auth (``POST /api/auth`` with a wrong
  password; last, as its failed logins lock the account's logins from the address).

Goals (issue 33): under each flood the second caller's p99 is at most 2 x its idle p99, and
none of its answers is a 5xx. Exit status 1 when one fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import secrets
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx
from sqlalchemy import create_engine

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
    free_port,
    fresh_database,
    goal,
    load_average,
    parse_wrk,
    scratch,
    sqlalchemy_url,
    start,
    summary_line,
    wait_http,
    wrk_headers,
)
from tests.bench.bench_tiles import (
    CLI,
    ROOT,
    configure_layer,
    make_cog,
    scene_tiles,
    start_mapsvc,
    url_of,
)
from tests.bench.stress import counts, percentile, server_errors

LUA = Path(__file__).with_name("fair_share.lua")
DB = "mapsvc_fair_share"
COUNTRIES = "public.countries"
GOAL = 2.0  # the second caller's p99 under a flood, at most this times its idle p99
VERTICES = 180  # of each filter's polygon
#: the classes of route, flooded in this order (auth last: its failures lock the address's logins)
KINDS = ("documents", "tiles", "items", "jobs", "job starts", "providers", "auth")
#: settings that would lift or change the service's protection: left to their defaults
PROTECTION = re.compile(
    r"MAPSVC_(RATE_|LOGIN_|DB_STATEMENTS_PER_CALLER$|FRONT_RATE_|FRONT_BURST$|FRONT_QUEUE$)"
)
#: the second caller's address: the flood's is 127.0.0.1, and the front counts each address
CALLER_ADDRESS = "127.0.0.2"


# --- the service -------------------------------------------------------------------------------


def make_db(pg: str) -> str:
    """The run's database made afresh: PostGIS and the countries."""
    engine = create_engine(fresh_database(pg, DB))
    try:
        rows = load_countries(engine, DEMO_DATA)  # also creates the postgis extension
    finally:
        engine.dispose()
    return f"database {DB}: {COUNTRIES} {rows} rows"


def fair_env(env: dict[str, str]) -> dict[str, str]:
    """The tile benchmark's environment of the API and the worker with the default quotas (and
    the diagnostic probe, a job start any operator may flood)."""
    env = {name: value for name, value in env.items() if not PROTECTION.match(name)}
    env["MAPSVC_DIAG_PROBE"] = "true"
    return env


def start_front(
    stack: ExitStack, work: Path, api: str, env: dict[str, str], deadline: Deadline
) -> tuple[Server, str]:
    """``mapsvc front`` (nginx, as ``make run`` starts it) before the API at ``api``, on a port
    of its own, with the API's environment ``env`` (the work dir, the default per-address
    limit); and its origin, once it answers ``/health``."""
    work.chmod(0o755)  # started as root, nginx's workers run as www-data: they must pass it
    port = free_port()
    env = {**env, "MAPSVC_PORT": str(port), "MAPSVC_BACKEND_PORT": str(urlsplit(api).port)}
    front = start(stack, "mapsvc front", [*CLI, "front"], work / "logs" / "front.log", env, ROOT)
    origin = f"http://127.0.0.1:{port}"
    with httpx.Client() as client:
        wait_http(client, f"{origin}{urlsplit(api).path}/health", [front], deadline, 30)
    return front, origin


def make_key(client: httpx.Client, api: str, name: str, role: str = "reader") -> str:
    """A new API key (``POST /api-keys`` with the admin key)."""
    response = client.post(f"{api}/api-keys", json={"name": name, "role": role}, timeout=30)
    if response.status_code != 201:
        raise RuntimeError(f"POST /api-keys: {response.status_code} {response.text[:300]}")
    return str(response.json()["key"])


def make_user(client: httpx.Client, api: str, login: str) -> None:
    """A reader user with a random password (the auth flood never knows it)."""
    body = {"login": login, "password": secrets.token_urlsafe(18), "role": "reader"}
    response = client.post(f"{api}/users", json=body, timeout=30)
    if response.status_code != 201:
        raise RuntimeError(f"POST /users: {response.status_code} {response.text[:300]}")


# --- what the callers ask ----------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """One request of the second caller's round."""

    name: str
    target: str
    kind: str  # the class of route it belongs to: left out of its class's flood


@dataclass(frozen=True)
class Flood:
    """One class of route, and how the flood caller asks it."""

    kind: str
    route: str  # as the report shows it
    targets: tuple[str, ...]  # path and query from the origin; wrk cycles through them
    method: str = "GET"
    body: bytes | None = None
    role: str = "reader"


def polygon(lon: float, lat: float, radius: float, vertices: int) -> str:
    """A WKT polygon of ``vertices`` points on a circle (the first repeated to close it)."""
    ring = [
        (
            lon + radius * math.cos(2 * math.pi * i / vertices),
            lat + radius * math.sin(2 * math.pi * i / vertices),
        )
        for i in range(vertices)
    ]
    ring.append(ring[0])
    return "POLYGON((" + ",".join(f"{x:.2f} {y:.2f}" for x, y in ring) + "))"


def item_targets(prefix: str) -> tuple[str, ...]:
    """OGC items of the countries with a 180-vertex S_INTERSECTS filter (8 polygons).

    OGC items take no ``nocache``: ``AND pop_est <> -{n}`` (``{n}``: a number of its own per
    request, ``fair_share.lua``) makes every filter another one, so no answer comes from the
    vector cache."""
    centres = [(15, 50), (30, 50), (-100, 40), (-60, -15), (20, 0), (80, 25), (110, 35), (135, -25)]
    targets = []
    for lon, lat in centres:
        cql = f"S_INTERSECTS(geom,{polygon(lon, lat, 8.0, VERTICES)}) AND pop_est <> -"
        filter_ = quote(cql, safe="") + "{n}"
        targets.append(f"{prefix}/ogc/collections/{COUNTRIES}/items?filter={filter_}")
    return tuple(targets)


def make_probes(prefix: str, config: dict[str, object], tile_path: str) -> list[Probe]:
    layer = str(config["layer"])
    return [
        Probe("tile, cached", tile_path, "tiles"),
        Probe("GeoJSON page (limit=10)", f"{prefix}/geojson/{COUNTRIES}?limit=10", "items"),
        Probe("TileJSON", f"{prefix}/rtile/{layer}/tilejson.json", "tilejson"),
        Probe("/health", f"{prefix}/health", "documents"),
    ]


def make_floods(prefix: str, tiles: Sequence[str], login: str) -> list[Flood]:
    """Each class of route's flood; ``tiles``: paths of tiles, ``login``: the user's."""
    wrong = json.dumps({"login": login, "password": "not-the-password"}).encode()
    return [
        Flood("documents", f"GET {prefix}/openapi.json", (f"{prefix}/openapi.json",)),
        Flood(
            "tiles",
            f"GET {prefix}/rtile/<layer>/en/<z>/<x>/<y>.png?nocache=1 ({len(tiles)} tiles)",
            tuple(f"{t}?nocache=1" for t in tiles),
        ),
        Flood(
            "items",
            f"GET {prefix}/ogc/collections/{COUNTRIES}/items?filter=S_INTERSECTS(geom,POLYGON(("
            f"{VERTICES} vertices))) AND pop_est <> -<n>",
            item_targets(prefix),
        ),
        Flood("jobs", f"GET {prefix}/jobs", (f"{prefix}/jobs",)),
        Flood(
            "job starts",
            f"POST {prefix}/diag/probe?steps=1&delay_ms=0 (operator key)",
            (f"{prefix}/diag/probe?steps=1&delay_ms=0",),
            "POST",
            role="operator",
        ),
        Flood("providers", f"GET {prefix}/geocode?q=Kyiv", (f"{prefix}/geocode?q=Kyiv",)),
        Flood("auth", "POST /api/auth (wrong password)", ("/api/auth",), "POST", wrong),
    ]


# --- the second caller -------------------------------------------------------------------------


@dataclass
class Phase:
    """The second caller's answers in one phase: every request's time and outcome."""

    seconds: list[float] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    rounds: int = 0
    by_probe: dict[str, list[float]] = field(default_factory=dict)

    def add(self, probe: str, seconds: float, outcome: str) -> None:
        self.seconds.append(seconds)
        self.outcomes[outcome] += 1
        self.by_probe.setdefault(probe, []).append(seconds)

    def p99s(self) -> str:
        """Each probe's p99 (ms)."""
        return ", ".join(
            f"{name} {1000 * percentile(s, 0.99):.1f}" for name, s in self.by_probe.items()
        )

    @property
    def p99_ms(self) -> float:
        return 1000 * percentile(self.seconds, 0.99) if self.seconds else math.nan

    def server_errors(self) -> int:
        return sum(n for o, n in self.outcomes.items() if o.isdigit() and int(o) >= 500)


async def ask(
    connection: HttpConnection, target: str, timeout_s: float
) -> tuple[HttpConnection, str]:
    """One GET on the caller's connection: its status, or the name of its error (then the
    connection is replaced). A kept-alive connection the server closed is opened again once."""
    for attempt in (1, 2):
        reused = connection.writer is not None
        try:
            status, _, _ = await asyncio.wait_for(connection.get(target), timeout_s)
            return connection, str(status)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            connection.close()
            if not (reused and attempt == 1):
                return connection, type(exc).__name__
        except (OSError, TimeoutError, ValueError) as exc:
            connection.close()
            return connection, type(exc).__name__
    raise AssertionError("unreachable")


async def rounds(
    address: tuple[str, int],
    auth: str,
    probes: Sequence[Probe],
    seconds: float,
    every_s: float,
    timeout_s: float,
) -> Phase:
    """The probes one after the other, a round every ``every_s`` (or at once after a slower
    round), for ``seconds``."""
    phase = Phase()
    connection = HttpConnection(*address, auth, source=CALLER_ADDRESS)
    end = time.monotonic() + seconds
    try:
        while (began := time.monotonic()) < end:
            for probe in probes:
                t0 = time.monotonic()
                connection, outcome = await ask(connection, probe.target, timeout_s)
                phase.add(probe.name, time.monotonic() - t0, outcome)
            phase.rounds += 1
            await asyncio.sleep(max(0.0, began + every_s - time.monotonic()))
    finally:
        connection.close()
    return phase


# --- CPU time --------------------------------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """CPU seconds (user and system) of process ``pid`` so far; 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (the API's render processes)."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            children = [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
        for child in children:
            found += [child, *descendants(child)]
    return found


def cpu_snapshot(pids: tuple[int, int], wrk_pid: int | None) -> dict[str, float]:
    """CPU seconds so far of the API's process (its event loop), of the processes below it
    (render processes), of the front (nginx) and of wrk; ``pids``: the API's and nginx's."""
    api_pid, front_pid = pids
    snapshot = {
        "API loop": cpu_s(api_pid),
        "renders": sum(cpu_s(p) for p in descendants(api_pid)),
        "front": sum(cpu_s(p) for p in (front_pid, *descendants(front_pid))),
    }
    if wrk_pid is not None:
        snapshot["wrk"] = cpu_s(wrk_pid)
    return snapshot


def cpu_share(before: dict[str, float], after: dict[str, float], seconds: float) -> str:
    """Each process's share of one core between two snapshots."""
    return ", ".join(
        f"{name} {100 * (after[name] - before[name]) / seconds:.0f} %" for name in after
    )


# --- the flood ---------------------------------------------------------------------------------


async def start_wrk(
    origin: str, flood: Flood, key: str, seconds: int, args: argparse.Namespace, tmp: Path
) -> asyncio.subprocess.Process:
    """wrk flooding ``flood``'s route with ``key`` for ``seconds`` (its output on its stdout)."""
    slug = re.sub(r"\W+", "-", flood.kind)
    targets = tmp / f"{slug}.targets"
    targets.write_text("\n".join(flood.targets) + "\n")
    script_args = [str(targets), flood.method]
    if flood.body is not None:
        body = tmp / f"{slug}.body"
        body.write_bytes(flood.body)
        script_args.append(str(body))
    argv = ["wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{seconds}s"]
    argv += [f"--timeout={args.wrk_timeout_s:g}s", "-s", str(LUA)]
    argv += wrk_headers(key)
    argv += [origin, "--", *script_args]
    # in a session of its own: another client, not a task of the second caller's (Linux's
    # autogroup would have them share one core's worth of time)
    return await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )


@dataclass
class Result:
    flood: Flood
    probes: list[Probe]
    idle: Phase
    loaded: Phase
    wrk: Wrk
    sample: str  # the flood route's answer to one request before the flood
    cpu: tuple[str, str]  # of one core, idle and under the flood

    @property
    def ratio(self) -> float:
        return self.loaded.p99_ms / self.idle.p99_ms

    @property
    def met(self) -> bool:
        return self.ratio <= GOAL and self.loaded.server_errors() == 0


def sample_answer(origin: str, flood: Flood, key: str) -> str:
    """The flood route's answer to one request: status, size, time, error code."""
    headers = auth_headers(key)
    body = flood.body
    if body is not None:
        headers["Content-Type"] = "application/json"
    t0 = time.monotonic()
    target = flood.targets[0].replace("{n}", "1")
    response = httpx.request(
        flood.method, origin + target, headers=headers, content=body, timeout=60
    )
    ms = 1000 * (time.monotonic() - t0)
    about = f"{response.status_code}, {len(response.content)} bytes, {ms:.0f} ms"
    if response.status_code >= 400:
        about += f": {response.text[:160]}"
    return about


async def measure(
    origin: str,
    flood: Flood,
    flood_key: str,
    pids: tuple[int, int],
    caller: tuple[str, Sequence[Probe]],
    args: argparse.Namespace,
    deadline: Deadline,
    tmp: Path,
) -> Result:
    """The second caller idle, then under ``flood``; the flood's answers."""
    parts = urlsplit(origin)
    address = (parts.hostname or "127.0.0.1", parts.port or 80)
    auth, all_probes = caller
    probes = [p for p in all_probes if p.kind != flood.kind]
    sample = sample_answer(origin, flood, flood_key)
    await asyncio.sleep(args.pause_s)
    timed = (args.duration_s, args.every_s, args.probe_timeout_s)
    before, t0 = cpu_snapshot(pids, None), time.monotonic()
    idle = await rounds(address, auth, probes, *timed)
    cpu_idle = cpu_share(before, cpu_snapshot(pids, None), time.monotonic() - t0)
    wrk = await start_wrk(
        origin, flood, flood_key, math.ceil(args.ramp_s + args.duration_s + 0.5), args, tmp
    )
    try:
        await asyncio.sleep(args.ramp_s)
        before, t0 = cpu_snapshot(pids, wrk.pid), time.monotonic()
        loaded = await rounds(address, auth, probes, *timed)
        cpu_loaded = cpu_share(before, cpu_snapshot(pids, wrk.pid), time.monotonic() - t0)
    except BaseException:
        wrk.kill()
        raise
    output, _ = await asyncio.wait_for(wrk.communicate(), deadline.left(args.wrk_timeout_s + 60))
    if wrk.returncode != 0:
        raise RuntimeError(f"wrk exited with {wrk.returncode}:\n{output.decode()[-2000:]}")
    return Result(
        flood,
        probes,
        idle,
        loaded,
        parse_wrk(output.decode(errors="replace")),
        sample,
        (cpu_idle, cpu_loaded),
    )


# --- the report --------------------------------------------------------------------------------


def flood_answers(wrk: Wrk) -> str:
    w = wrk.summary
    errors = {k: int(w[k]) for k in ("connect", "read", "write", "timeout") if int(w[k])}
    rate = int(w["requests"]) / max(float(w["seconds"]), 1e-9)
    return (
        f"{int(w['requests']):,} in {w['seconds']} s ({rate:,.0f}/s): {counts(wrk.statuses)}"
        f"{'; socket errors ' + counts(Counter(errors)) if errors else ''};"
        f" p50 {w['p50_ms']} ms, p99 {w['p99_ms']} ms"
    )


def print_result(r: Result) -> None:
    print(
        f"  the flood's route, asked once before it: {r.sample}\n"
        f"  second caller ({', '.join(p.name for p in r.probes)}):"
        f" idle {r.idle.rounds} rounds, p99 {r.idle.p99_ms:.1f} ms, {counts(r.idle.outcomes)};"
        f" under the flood {r.loaded.rounds} rounds, p99 {r.loaded.p99_ms:.1f} ms,"
        f" {counts(r.loaded.outcomes)}\n"
        f"  second caller's p99 by request (ms), idle: {r.idle.p99s()};"
        f" under the flood: {r.loaded.p99s()}\n"
        f"  flood: {flood_answers(r.wrk)}\n"
        f"  CPU (of one core) idle: {r.cpu[0]}; under the flood: {r.cpu[1]}"
    )


def print_table(results: Sequence[Result], args: argparse.Namespace) -> None:
    print(
        f"\n=== fair share: {args.connections} connections x {args.duration_s:g} s per flood,"
        f" load average {load_average()} ==="
    )
    print(
        f"{'class':12} {'idle p99 ms':>11} {'flood p99 ms':>12} {'ratio':>6} {'5xx':>4}"
        "  flood answers"
    )
    for r in results:
        print(
            f"{r.flood.kind:12} {r.idle.p99_ms:11.1f} {r.loaded.p99_ms:12.1f} {r.ratio:6.2f}"
            f" {r.loaded.server_errors():4d}  {flood_answers(r.wrk)}"
        )
    print()
    for r in results:
        goal(
            f"fair share, {r.flood.kind} flood: other caller's p99",
            r.ratio,
            GOAL,
            "x idle p99",
            at_most=True,
        )
        errors = r.loaded.server_errors()
        summary_line(
            f"{'fair share, ' + r.flood.kind + ' flood: other caller 5xx':58} {errors:8d}"
            f" {'answers':14} goal == 0     {'met' if errors == 0 else 'NOT met'}"
        )


# --- main --------------------------------------------------------------------------------------


def parse_args(kinds: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=10.0, help="each phase (idle, flood)")
    parser.add_argument("--every-s", type=float, default=0.25, help="a round of the 2nd caller")
    parser.add_argument("--ramp-s", type=float, default=1.0, help="flood before the 2nd caller")
    parser.add_argument("--pause-s", type=float, default=3.0, help="quiet before each idle phase")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections")
    parser.add_argument("--wrk-timeout-s", type=float, default=10.0, help="wrk's --timeout")
    parser.add_argument("--probe-timeout-s", type=float, default=30.0, help="a request gives up")
    parser.add_argument("--only", nargs="+", choices=kinds, help="these classes only")
    parser.add_argument("--workers", type=int, default=2, help="render and worker processes")
    add_load_run_arguments(parser, "redis://127.0.0.1:6379/15")
    return parser.parse_args()


def main() -> int:
    args = parse_args(KINDS)
    pg, deadline = begin_load_run(args)
    key = admin_key()
    with ExitStack() as stack, httpx.Client(headers=auth_headers(key)) as client:
        work = scratch(stack, "fair-share", pg, DB, args.keep)  # before the servers start
        logs = work / "logs"
        print(make_db(pg))
        # the servers start with this process's environment
        os.environ["MAPSVC_DATABASE_URL"] = f"{sqlalchemy_url(pg)}/{DB}"
        cog, about = make_cog(work)
        env: dict[str, str] = {}

        def changed(started: dict[str, str]) -> dict[str, str]:
            env.update(fair_env(started))  # the front's too
            return env

        servers, api = start_mapsvc(
            stack, work, args.workers, args.redis, 1, logs, client, deadline, key, changed
        )
        front, origin = start_front(stack, work, api, env, deadline)
        servers.append(front)
        prefix = urlsplit(api).path
        config = configure_layer(client, api, deadline)
        template = str(config["url"])
        tiles = [url_of(template, t) for t in scene_tiles(cog, 8, 12)]
        random.Random(33).shuffle(tiles)
        probes = make_probes(prefix, config, url_of(template, scene_tiles(cog, 12, 12)[0]))
        login = "fair-share-user"
        make_user(client, api, login)
        floods = [f for f in make_floods(prefix, tiles, login) if f.kind in (args.only or KINDS)]
        caller_key = make_key(client, api, "fair-share-caller")
        with httpx.Client(headers=auth_headers(caller_key)) as caller:
            for p in probes:  # every probe answering; the tile cached from then on
                wait_http(caller, origin + p.target, servers, deadline, 120)
        print(f"raster layer: {about}")
        print(
            f"mapsvc: the nginx front ({origin}) before the API (1 process,"
            f" MAPSVC_RENDER_PROCESSES={args.workers}) + worker -c {args.workers}, default quotas"
            f" and per-address limit; the flood from 127.0.0.1, the second caller from"
            f" {CALLER_ADDRESS}; Redis {args.redis}; {os.cpu_count()} CPUs;"
            f" load average before: {load_average()}"
        )
        if os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1):
            print("WARNING: the machine is busy with other work: every figure will be skewed")
        print(
            f"second caller: a round every {args.every_s:g} s of "
            + ", ".join(f"{p.name} ({p.target})" for p in probes)
        )
        results = []
        with tempfile.TemporaryDirectory(prefix="fair-share-wrk-") as tmp:
            for flood in floods:
                flood_key = make_key(client, api, f"fair-share-{flood.kind}", flood.role)
                print(f"\n--- {flood.kind}: {flood.route} ({args.connections} connections)")
                result = asyncio.run(
                    measure(
                        origin,
                        flood,
                        flood_key,
                        # uvicorn and nginx (`mapsvc serve` and `mapsvc front` exec them)
                        (servers[0].popen.pid, front.popen.pid),
                        (auth_lines(caller_key), probes),
                        args,
                        deadline,
                        Path(tmp),
                    )
                )
                print_result(result)
                results.append(result)
                for server in servers:
                    server.check()
        print_table(results, args)
        print(server_errors(servers))
        return 0 if all(r.met for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
