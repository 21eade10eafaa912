"""Benchmark: vector tiles and GeoJSON from PostGIS against tipg, and GeoJSON against bare SQL.

Run from the checkout with ``make bench`` (or ``.venv/bin/python -m tests.bench.bench_vector``);
PostgreSQL with PostGIS and Redis must be running (``bash deploy/services.sh``). In one run:

- a database of its own, ``mapsvc_bench`` (dropped and made afresh; dropped again at the end
  unless ``--keep-db``), holds ``public.countries`` (the Natural Earth countries, loaded by
  ``shared.demo.load_countries``) and ``public.bench_points`` (500,000 random points made by
  ``generate_series``, with a primary key, a GiST index and statistics);
- tipg (installed into a virtualenv of its own, reused between runs) and mapsvc's API run
  under ``uvicorn --workers N`` each, on loopback ports, on that database; mapsvc uses a Redis
  db of its own (flushed first), a random admin key that every request to it carries
  (``MAPSVC_ADMIN_API_KEY``), and quotas it does not reach. Both make tiles of extent 4096
  with a 64 px buffer, clipped, with the same cap of features per tile;
- the same tiles (countries: every tile of zooms 0-5; points: every tile of zooms 3-5, where no
  tile holds more points than the cap), in one fixed shuffled order, are asked of both. A first
  pass per server with a Python client is a warm-up that also decodes every tile and counts its
  features (tipg, mapsvc uncached, mapsvc filling its cache): the servers answer the same
  tiles. Then every throughput figure comes from ``wrk`` (a C client: a Python one saturates a
  core before the server does), the same settings for both (``--concurrency`` connections,
  ``Accept-Encoding: gzip``, ``--seconds`` a pass), cases interleaved, medians of
  ``--passes``. PostGIS alone is mapsvc's tile SQL run straight over psycopg (prepared and
  planned generically, as mapsvc runs it; no HTTP, no gzip) over as many connections;
- GeoJSON of all countries: the feature SQL of ``debug.sql`` run on PostgreSQL with psycopg,
  fetching every row (median of ``--geojson-runs``), against ``/geojson/public.countries``
  uncached (``nocache=1``) and cached, and tipg's items, each one request at a time (``wrk``,
  one connection, its p50); the content is checked first with a Python client.

Goals (issues 13 and 35), printed with each ratio: uncached tiles/s >= 3x tipg's and >= 80% of
PostGIS alone's, for both tables; a tile with a CQL2 filter (one that keeps every feature: its
cost alone) <= 1.2x the time of the same tile without; GeoJSON <= 1.2x the bare query.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import psycopg
from sqlalchemy import create_engine, text

from shared.demo import DEMO_DATA, load_countries
from shared.redis_clients import sync_client
from tests.bench._harness import (
    Deadline,
    HttpConnection,
    Server,
    WrkCase,
    WrkResult,
    add_pg_argument,
    admin_key,
    auth_headers,
    auth_lines,
    check_flushable,
    check_loopback,
    drop_database,
    free_port,
    fresh_database,
    goal,
    load_average,
    service_env,
    sqlalchemy_url,
    start,
    wait_http,
    wrk_rate,
)

ROOT = Path(__file__).resolve().parents[2]
BENCH_DB = "mapsvc_bench"
TIPG_REQUIREMENTS = ("tipg>=0.7", "uvicorn[standard]>=0.30,<1")
MVT_TYPE = "application/vnd.mapbox-vector-tile"
COUNTRIES, POINTS = "public.countries", "public.bench_points"
EXTENT, BUFFER = 4096, 64  # mapsvc's (shared.vector.tiles); tipg is set to the same


def make_bench_db(pg: str, points: int, seed: float) -> str:
    """The bench database made afresh with both tables; a line describing them."""
    engine = create_engine(fresh_database(pg, BENCH_DB))
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE EXTENSION postgis"))
        countries = load_countries(engine, DEMO_DATA)
        t0 = time.perf_counter()
        with engine.begin() as conn:
            conn.execute(
                text(
                    "CREATE TABLE public.bench_points (id integer PRIMARY KEY, name text NOT NULL,"
                    " category integer NOT NULL, value double precision NOT NULL,"
                    " geom geometry(Point, 4326) NOT NULL)"
                )
            )
            conn.execute(text("SELECT setseed(:seed)"), {"seed": seed})
            conn.execute(
                text(
                    "INSERT INTO public.bench_points"
                    " SELECT i, 'point ' || i, floor(random() * 10)::int,"
                    " round((random() * 1000)::numeric, 2)::float8,"
                    " ST_SetSRID(ST_MakePoint(random() * 360 - 180, random() * 170 - 85), 4326)"
                    " FROM generate_series(1, :n) AS i"
                ),
                {"n": points},
            )
            conn.execute(text("CREATE INDEX ON public.bench_points USING gist (geom)"))
            conn.execute(text("ANALYZE public.bench_points"))
        made_s = time.perf_counter() - t0
        with engine.connect() as conn:
            postgis = conn.execute(text("SELECT postgis_lib_version()")).scalar()
    finally:
        # the sessions end here, so their table statistics (mapsvc's cache version) are flushed
        engine.dispose()
    return (
        f"database {BENCH_DB} (PostGIS {postgis}): {COUNTRIES} {countries} rows;"
        f" {POINTS} {points} random points (lon -180..180, lat -85..85, made in {made_s:.1f} s)"
    )


def most_points_per_tile(pg: str, zoom: int) -> int:
    """About the most points one tile of ``zoom`` holds, its buffer included."""
    half = 20037508.342789244  # half the width of the Web Mercator square, m
    sql = """
        SELECT max(n) FROM (
            SELECT count(*) AS n
            FROM (SELECT ST_Transform(geom, 3857) AS g FROM public.bench_points) p
            GROUP BY floor((ST_X(g) + %(half)s) / %(w)s), floor((%(half)s - ST_Y(g)) / %(w)s)
        ) s
    """
    with psycopg.connect(f"{pg}/{BENCH_DB}", connect_timeout=5) as conn:
        row = conn.execute(sql, {"half": half, "w": 2 * half / 2**zoom}).fetchone()
    # the buffer widens a tile by BUFFER/EXTENT on each side
    return int((row[0] if row and row[0] else 0) * (1 + 2 * BUFFER / EXTENT) ** 2) + 1


# --- tiles and their content -------------------------------------------------------------------


Tile = tuple[int, int, int]  # z, x, y


def zoom_tiles(minzoom: int, maxzoom: int) -> list[Tile]:
    return [
        (z, x, y) for z in range(minzoom, maxzoom + 1) for x in range(2**z) for y in range(2**z)
    ]


def fill(template: str, tile: Tile) -> str:
    z, x, y = tile
    return template.format(z=z, x=x, y=y)


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _fields(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field of a protobuf message."""
    i = start
    while i < end:
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, i = _varint(buf, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            size, i = _varint(buf, i)
            yield number, i, i + size
            i += size
        else:
            raise ValueError(f"protobuf wire type {wire} at byte {i}")


def mvt_features(data: bytes) -> Counter[str]:
    """Features per layer of a Mapbox Vector Tile: a bare protobuf walk, no decoder needed."""
    layers: Counter[str] = Counter()
    for number, first, last in _fields(data, 0, len(data)):
        if number != 3:  # Tile.layers
            continue
        name, count = "", 0
        for inner, a, b in _fields(data, first, last):
            if inner == 1:  # Layer.name
                name = data[a:b].decode()
            elif inner == 2:  # Layer.features
                count += 1
        layers[name] += count
    return layers


# --- the client --------------------------------------------------------------------------------


@dataclass
class Pass:
    """One pass over the tiles: wall time, per-request latency, what came back."""

    seconds: float
    latencies_ms: list[float]
    answers: Counter[str] = field(default_factory=Counter)
    cache: Counter[str] = field(default_factory=Counter)
    body_bytes: int = 0
    features: Counter[str] = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return len(self.latencies_ms) / self.seconds


def _kind(status: int, headers: dict[str, str], body: bytes) -> str:
    """The answer as ``<status> <content type>[ gzip]``, flagged when the body does not fit."""
    kind = f"{status} {headers.get('content-type', '-').split(';')[0]}"
    if headers.get("content-encoding") == "gzip":
        kind += " gzip" if body[:2] == b"\x1f\x8b" else " (gzip header, not gzip)"
    return kind


async def _http_pass(
    urls: Sequence[str], concurrency: int, timeout_s: float, decode: bool, auth: str
) -> Pass:
    result = Pass(0.0, [])
    first = urlsplit(urls[0])
    host, port = first.hostname or "127.0.0.1", first.port or 80
    pending: Iterator[str] = iter(urls)
    # the same Accept-Encoding to both servers (tipg compresses through its middleware), and
    # mapsvc's admin key to mapsvc (``auth``)
    headers = "Accept-Encoding: gzip\r\n" + auth

    async def fetch() -> None:
        connection = HttpConnection(host, port, headers)
        try:
            for url in pending:
                parts = urlsplit(url)
                target = f"{parts.path}?{parts.query}" if parts.query else parts.path
                t0 = time.perf_counter()
                try:
                    status, answer, body = await asyncio.wait_for(connection.get(target), timeout_s)
                except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
                    result.latencies_ms.append((time.perf_counter() - t0) * 1000)
                    result.answers[f"error {type(exc).__name__}"] += 1
                    connection.close()
                    continue
                result.latencies_ms.append((time.perf_counter() - t0) * 1000)
                result.answers[_kind(status, answer, body)] += 1
                result.cache[answer.get("x-cache", "-")] += 1
                result.body_bytes += len(body)
                if decode and status == 200 and body:
                    data = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
                    result.features.update(mvt_features(data))
        finally:
            connection.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(fetch() for _ in range(concurrency)))
    result.seconds = time.perf_counter() - t0
    return result


def run_async(make: Callable[[], Any], deadline: Deadline) -> Any:
    """Run a coroutine (uvloop when installed), bounded by the deadline."""

    async def bounded() -> Any:
        return await asyncio.wait_for(make(), deadline.left())

    try:
        import uvloop
    except ImportError:
        return asyncio.run(bounded())
    return uvloop.run(bounded())


def http_pass(
    urls: Sequence[str],
    concurrency: int,
    deadline: Deadline,
    decode: bool = False,
    auth: str = "",
) -> Pass:
    """One pass over ``urls`` with ``concurrency`` connections; ``auth``: header lines."""
    result: Pass = run_async(
        lambda: _http_pass(urls, concurrency, deadline.left(120), decode, auth), deadline
    )
    return result


# --- PostGIS alone (reference) -----------------------------------------------------------------


def tile_sql(pg: str, layer: str, max_features: int) -> str:
    """mapsvc's tile SQL (``shared.vector.tiles``) with every non-geometry column, for psycopg."""
    schema, table = layer.split(".")
    with psycopg.connect(f"{pg}/{BENCH_DB}", connect_timeout=5) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
                " AND NOT attisdropped AND atttypid <> 'geometry'::regtype ORDER BY attnum",
                (layer,),
            )
        ]
    columns = "".join(f', t."{n}"' for n in names)
    return f"""
        WITH bounds AS (SELECT ST_TileEnvelope(%(z)s::int, %(x)s::int, %(y)s::int) AS b),
        features AS (
            SELECT ST_AsMVTGeom(ST_Transform(t.geom, 3857), bounds.b, {EXTENT}, {BUFFER}, true)
                   AS mvt_geom{columns}
            FROM "{schema}"."{table}" t, bounds
            WHERE t.geom && ST_Transform(bounds.b, 4326)
            LIMIT {int(max_features)}
        )
        SELECT ST_AsMVT(features.*, '{layer}', {EXTENT}, 'mvt_geom') FROM features
        WHERE mvt_geom IS NOT NULL
    """


async def _postgis_pass(
    dsn: str, sql: str, tiles: Sequence[Tile], concurrency: int, seconds: float
) -> Pass:
    """The tiles in turn over ``concurrency`` connections, again and again for ``seconds``
    (at least once over all of them)."""
    result = Pass(0.0, [])
    # as mapsvc runs it (shared.vector.db.ReadPool): prepared at once, planned generically
    connections = [
        await psycopg.AsyncConnection.connect(
            dsn,
            autocommit=True,
            connect_timeout=5,
            prepare_threshold=0,
            options="-c plan_cache_mode=force_generic_plan",
        )
        for _ in range(concurrency)
    ]
    count = itertools.count()
    end = time.perf_counter() + seconds

    async def work(conn: psycopg.AsyncConnection[Any]) -> None:
        while (i := next(count)) < len(tiles) or time.perf_counter() < end:
            z, x, y = tiles[i % len(tiles)]
            t0 = time.perf_counter()
            row = await (await conn.execute(sql, {"z": z, "x": x, "y": y})).fetchone()
            result.latencies_ms.append((time.perf_counter() - t0) * 1000)
            data = bytes(row[0]) if row and row[0] else b""
            result.answers["tile" if data else "empty"] += 1
            result.body_bytes += len(data)

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(work(c) for c in connections))
        result.seconds = time.perf_counter() - t0
    finally:
        for conn in connections:
            await conn.close()
    return result


def postgis_pass(
    pg: str,
    sql: str,
    tiles: Sequence[Tile],
    concurrency: int,
    deadline: Deadline,
    seconds: float = 0.0,
) -> Pass:
    result: Pass = run_async(
        lambda: _postgis_pass(f"{pg}/{BENCH_DB}", sql, tiles, concurrency, seconds), deadline
    )
    return result


# --- the cases ---------------------------------------------------------------------------------


def measured(result: Pass) -> WrkResult:
    """What a pass of the Python client (the PostGIS reference) measured, as wrk reports it."""
    cuts = statistics.quantiles(result.latencies_ms, n=100, method="inclusive")
    return WrkResult(result.rate, cuts[49], cuts[98])


def measure(
    cases: Sequence[tuple[WrkCase, Callable[[], WrkResult]]], passes: int, deadline: Deadline
) -> None:
    """``passes`` rounds over the cases in turn, so that drift of the machine hits all alike."""
    for i in range(passes):
        for case, run in cases:
            deadline.left()
            result = run()
            case.passes.append(result)
            print(
                f"  pass {i + 1}/{passes} {case.name}: {result.rate:.1f} tiles/s"
                f" (p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms)",
                flush=True,
            )


def wrk_pass(
    urls: Sequence[str], args: argparse.Namespace, headers: dict[str, str], seconds: int
) -> WrkResult:
    """One wrk run over ``urls`` (cycled), ``Accept-Encoding: gzip`` and ``headers`` sent."""
    first = urlsplit(urls[0])
    base = f"{first.scheme}://{first.netloc}"
    paths = [urlsplit(u)._replace(scheme="", netloc="").geturl() for u in urls]
    return wrk_rate(
        base,
        paths,
        headers={"Accept-Encoding": "gzip", **headers},
        seconds=seconds,
        connections=args.concurrency,
        threads=args.wrk_threads,
    )


# --- tipg --------------------------------------------------------------------------------------


def tipg_venv(venv: Path, deadline: Deadline) -> str:
    """Make the virtualenv with tipg when missing (reused otherwise); the versions in it."""
    python = venv / "bin" / "python"
    probe = [
        str(python),
        "-c",
        "from importlib.metadata import version as v;"
        "print('tipg', v('tipg'), 'uvicorn', v('uvicorn'), 'asyncpg', v('asyncpg'),"
        " 'starlette', v('starlette'))",
    ]
    found = subprocess.run(probe, capture_output=True, text=True) if python.exists() else None
    if found is None or found.returncode != 0:
        print(f"installing tipg into {venv} ...", flush=True)
        if not python.exists():
            subprocess.run(
                [sys.executable, "-m", "venv", str(venv)], check=True, timeout=deadline.left(120)
            )
        pip = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *TIPG_REQUIREMENTS],
            capture_output=True,
            text=True,
            timeout=deadline.left(900),
        )
        if pip.returncode != 0:
            raise RuntimeError(f"pip install {' '.join(TIPG_REQUIREMENTS)} failed:\n{pip.stderr}")
        found = subprocess.run(probe, capture_output=True, text=True, check=True)
    return found.stdout.strip()


def uvicorn_flags(port: int, workers: int) -> list[str]:
    """The same server flags for both: workers, no access log (it costs per request)."""
    return [
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--no-access-log",
        "--log-level",
        "warning",
    ]


def start_tipg(
    stack: ExitStack,
    venv: Path,
    pg: str,
    workers: int,
    max_features: int,
    work: Path,
    client: httpx.Client,
    deadline: Deadline,
) -> tuple[Server, str]:
    """tipg under ``uvicorn --workers``, once it lists both tables; and its base URL."""
    port = free_port()
    argv = [str(venv / "bin" / "uvicorn"), "tipg.main:app", *uvicorn_flags(port, workers)]
    # its own pyproj finds its own PROJ data; ours may be set for the mapnik wheel
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PROJ_", "GDAL_DATA", "MAPSVC_", "TIPG_", "DATABASE_URL"))
    }
    env.update(
        DATABASE_URL=f"{pg}/{BENCH_DB}",
        TIPG_DB_SCHEMAS='["public"]',
        TIPG_TILE_RESOLUTION=str(EXTENT),
        TIPG_TILE_BUFFER=str(BUFFER),
        TIPG_TILE_CLIP="true",
        TIPG_MAX_FEATURES_PER_TILE=str(max_features),
    )
    # cwd: a folder without a .env for its settings to pick up
    server = start(stack, "tipg", argv, work / "tipg.log", env, work)
    base = f"http://127.0.0.1:{port}"
    wait_http(client, f"{base}/healthz", [server], deadline, 120)
    for layer in (COUNTRIES, POINTS):
        wait_http(client, f"{base}/collections/{layer}", [server], deadline, 60)
    return server, base


def tipg_tile_template(client: httpx.Client, base: str, layer: str) -> str:
    """The tile URL template of the installed tipg (from its OpenAPI), WebMercatorQuad."""
    paths: dict[str, Any] = {}
    for doc in ("/api", "/openapi.json"):  # tipg serves its OpenAPI at /api
        response = client.get(base + doc, timeout=30)
        if response.status_code == 200 and "paths" in response.json():
            paths = response.json()["paths"]
            break
    routes = [
        p
        for p in paths
        if p.startswith("/collections/{collectionId}/tiles/")
        and p.count("{") == 5
        and "{tileMatrixSetId}" in p
        and "." not in p.rsplit("/", 1)[-1]
    ]
    if not routes:
        raise RuntimeError(f"no tile route with a tile matrix set in tipg's OpenAPI: {list(paths)}")
    route = routes[0]
    names = re.findall(r"{(\w+)}", route)[2:]  # z, x, y by whatever name this version uses
    route = route.replace("{collectionId}", layer).replace("{tileMatrixSetId}", "WebMercatorQuad")
    for name, key in zip(names, ("z", "x", "y"), strict=True):
        route = route.replace(f"{{{name}}}", f"{{{key}}}")
    return f"{base}{route}"


# --- mapsvc ------------------------------------------------------------------------------------


def start_mapsvc(
    stack: ExitStack,
    pg: str,
    redis_url: str,
    workers: int,
    max_features: int,
    work: Path,
    client: httpx.Client,
    deadline: Deadline,
    key: str,
) -> tuple[Server, str]:
    """mapsvc's API under ``uvicorn --workers`` on the bench database and a flushed Redis db.

    ``key`` is its admin key (``MAPSVC_ADMIN_API_KEY``): ``client`` must send it.
    """
    check_flushable(redis_url)
    redis = sync_client(redis_url)
    redis.flushdb()
    redis.close()
    port = free_port()
    env = {
        **os.environ,
        "MAPSVC_PORT": str(port),
        "MAPSVC_HOST": "127.0.0.1",
        "MAPSVC_DATABASE_URL": f"{sqlalchemy_url(pg)}/{BENCH_DB}",
        "MAPSVC_REDIS_URL": redis_url,
        "MAPSVC_WORK_DIR": str(work / "mapsvc-work"),
        "MAPSVC_VTILE_MAX_FEATURES": str(max_features),
        "MAPSVC_LOG_LEVEL": "WARNING",
        **service_env(key),
    }
    argv = [sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory"]
    server = start(
        stack, "mapsvc", [*argv, *uvicorn_flags(port, workers)], work / "mapsvc.log", env, ROOT
    )
    api = f"http://127.0.0.1:{port}/api-user"
    wait_http(client, f"{api}/health", [server], deadline, 120)
    for layer in (COUNTRIES, POINTS):
        wait_http(client, f"{api}/vtile/{layer}/0/0/0.pbf", [server], deadline, 60, (200, 204))
    return server, api


# --- GeoJSON -----------------------------------------------------------------------------------


def bare_sql(debug_sql: str, limit: int, offset: int) -> str:
    """The feature SQL of ``debug.sql`` with its ``:limit``/``:offset`` placeholders filled."""
    sql = re.sub(r"(?<!:):limit\b", str(int(limit)), debug_sql)
    sql = re.sub(r"(?<!:):offset\b", str(int(offset)), sql)
    if left := re.findall(r"(?<!:):[A-Za-z_]\w*", sql):
        raise RuntimeError(f"debug.sql holds other placeholders {left}: {sql}")
    return sql


def timed_ms(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


@dataclass
class GeoJson:
    """Milliseconds of one answer (median) for each way of getting all countries as GeoJSON."""

    features: int
    size: int
    ms: dict[str, float]


def measure_geojson(
    client: httpx.Client,
    pg: str,
    api: str,
    tipg: str,
    args: argparse.Namespace,
    key: str,
    deadline: Deadline,
) -> GeoJson:
    """The bare query (psycopg, median of runs), then mapsvc uncached and cached and tipg's
    items over HTTP, one request at a time (``wrk``, one connection: its p50), content checked
    first with a Python client."""
    plain = {"Accept-Encoding": "identity"}  # bytes as made: no compression on either side
    url = f"{api}/geojson/{COUNTRIES}"
    debug = client.get(url, params={"debug": 1, "nocache": 1}, headers=plain, timeout=60).json()
    sql = bare_sql(debug["debug"]["sql"], limit=10000, offset=0)
    expected = int(debug["numberMatched"])
    tipg_path = f"{tipg}/collections/{COUNTRIES}/items?limit=10000&f=geojson"
    sizes: set[int] = set()
    for params, cache in (({"nocache": 1}, "MISS"), ({}, None), ({}, "HIT")):
        response = client.get(url, params=params, headers=plain, timeout=60)
        body = response.content
        if response.status_code != 200 or (cache and response.headers["x-cache"] != cache):
            raise RuntimeError(f"GET {response.url}: {response.status_code} {body[:300]!r}")
        parsed = json.loads(body)
        if parsed["numberReturned"] != expected or len(parsed["features"]) != expected:
            raise RuntimeError(f"mapsvc GeoJSON has {parsed['numberReturned']} of {expected}")
        sizes.add(len(body))
    response = client.get(tipg_path, headers=plain, timeout=60)
    if response.status_code != 200 or len(response.json()["features"]) != expected:
        raise RuntimeError(f"tipg items: {response.status_code} {response.text[:300]}")

    ms: dict[str, float] = {}
    with psycopg.connect(f"{pg}/{BENCH_DB}", connect_timeout=5) as conn:

        def query() -> None:
            rows = conn.execute(sql).fetchall()
            if len(rows) != expected:
                raise RuntimeError(f"the bare query gave {len(rows)} rows, not {expected}")

        for _ in range(5):  # warm-up
            query()
        ms["bare"] = statistics.median(timed_ms(query) for _ in range(args.geojson_runs))

    def one_at_a_time(full: str, headers: dict[str, str]) -> float:
        deadline.left()
        parts = urlsplit(full)
        done = wrk_rate(
            f"{parts.scheme}://{parts.netloc}",
            [f"{parts.path}?{parts.query}"],
            headers={**plain, **headers},
            seconds=args.geojson_seconds,
            connections=1,
            threads=1,
        )
        return done.p50_ms

    auth = auth_headers(key)
    ms["mapsvc"] = one_at_a_time(f"{url}?nocache=1", auth)
    ms["cached"] = one_at_a_time(url, auth)
    ms["tipg"] = one_at_a_time(tipg_path, {})
    return GeoJson(expected, max(sizes), ms)


# --- the report --------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def row(
    name: str,
    rate: float,
    p50: float,
    p99: float,
    ratio: str = "",
    target: str = "",
    result: str = "",
) -> str:
    return (
        f"{name:40} {rate:9.1f} {p50:8.1f} {p99:8.1f}  {ratio:>18}  {target:>8}  {result}".rstrip()
    )


def header() -> str:
    return (
        f"{'case':40} {'tiles/s':>9} {'p50 ms':>8} {'p99 ms':>8}  {'ratio':>18}  {'target':>8}"
        "  result"
    )


@dataclass
class LayerRun:
    """What was measured for one layer."""

    layer: str
    tiles: list[Tile]
    tipg: WrkCase
    uncached: WrkCase
    cached: WrkCase
    postgis: WrkCase
    filtered: WrkCase  # uncached, with a CQL2 filter that keeps every feature
    target: float  # of uncached tiles/s over tipg's
    check: dict[str, Pass]  # the warm-up passes, with decoded features


#: uncached tiles/s over PostGIS alone's (the tile SQL over as many connections, no HTTP):
#: issue 13 asked 0.5, issue 35 0.8
POSTGIS_TARGET = 0.8
#: a filtered tile's time over an unfiltered one's, at most (issue 35)
FILTER_TARGET = 1.2
#: a CQL2 filter of each layer that keeps every feature (its cost, not fewer features)
KEEP_ALL = {"public.countries": "pop_est >= 0", "public.bench_points": "category >= 0"}


def print_layer(run: LayerRun) -> None:
    zooms = Counter(z for z, _, _ in run.tiles)
    about = ", ".join(f"z{z}: {n}" for z, n in sorted(zooms.items()))
    print(f"\n{run.layer}: {len(run.tiles)} tiles ({about})")
    print(header())
    peer = run.tipg
    print(row(peer.name, peer.rate, *peer.latency()))
    ratio = run.uncached.rate / peer.rate
    target, result = f">= {run.target:g}x", verdict(ratio >= run.target)
    print(
        row(
            run.uncached.name,
            run.uncached.rate,
            *run.uncached.latency(),
            f"{ratio:.2f}x tipg",
            target,
            result,
        )
    )
    ratio = run.uncached.rate / run.postgis.rate
    target, result = f">= {POSTGIS_TARGET:.0%}", verdict(ratio >= POSTGIS_TARGET)
    print(
        row(
            "  (the same, over PostGIS alone)",
            run.uncached.rate,
            *run.uncached.latency(),
            f"{ratio:.0%} PostGIS",
            target,
            result,
        )
    )
    slower = run.uncached.rate / run.filtered.rate
    target, result = f"<= {FILTER_TARGET:g}x", verdict(slower <= FILTER_TARGET)
    print(
        row(
            run.filtered.name,
            run.filtered.rate,
            *run.filtered.latency(),
            f"{slower:.2f}x the time",
            target,
            result,
        )
    )
    ratio = run.cached.rate / peer.rate
    print(row(run.cached.name, run.cached.rate, *run.cached.latency(), f"{ratio:.2f}x tipg"))
    ratio = run.postgis.rate / peer.rate
    print(row(run.postgis.name, run.postgis.rate, *run.postgis.latency(), f"{ratio:.2f}x tipg"))


def print_checks(run: LayerRun) -> None:
    print(f"\n{run.layer}: warm-up passes (Python client, every tile decoded); answers; X-Cache")
    for name, p in run.check.items():
        print(
            f"  {name}: {', '.join(f'{n} x {k}' for k, n in p.answers.most_common())}"
            f"; {p.body_bytes / 1e6:.2f} MB",
            end="",
        )
        print(f"; X-Cache: {', '.join(f'{n} x {k}' for k, n in sorted(p.cache.items()))}")
        bad = sorted(
            k
            for k in p.answers
            if not (k.startswith(f"200 {MVT_TYPE}") and "not gzip" not in k)
            and not k.startswith("204 ")
        )
        if bad:
            print(f"  WARNING: {name} had unexpected answers: {', '.join(bad)}")
    counts = {
        name: ", ".join(f"{n} in layer {layer!r}" for layer, n in p.features.items()) or "none"
        for name, p in run.check.items()
    }
    totals = [sum(p.features.values()) for p in run.check.values()]
    spread = (max(totals) - min(totals)) / max(1, max(totals))
    print(
        "  features over all tiles: "
        + "; ".join(f"{name}: {text}" for name, text in counts.items())
        + (" (the same)" if spread == 0 else f" (they differ by {spread:.1%})")
    )


def print_geojson(result: GeoJson) -> None:
    bare = result.ms["bare"]
    print(
        f"\nGeoJSON of all {COUNTRIES} ({result.features} features, {result.size} bytes"
        " uncompressed): ms of one answer, one at a time (HTTP: wrk, 1 connection, p50)"
    )
    print(f"{'way':58} {'ms':>8}  {'ratio':>14}  {'target':>8}  result")
    lines = [
        ("bare SQL (psycopg, the same feature query, all rows)", "bare", None),
        ("mapsvc /geojson?nocache=1 (HTTP, whole body)", "mapsvc", 1.2),
        ("mapsvc /geojson cached (HIT)", "cached", None),
        ("tipg /items?limit=10000 (reference)", "tipg", None),
    ]
    for label, name, target in lines:
        ms = result.ms[name]
        ratio = "" if name == "bare" else f"{ms / bare:.2f}x bare SQL"
        if target is None:
            print(f"{label:58} {ms:8.2f}  {ratio:>14}".rstrip())
        else:
            met = verdict(ms / bare <= target)
            print(f"{label:58} {ms:8.2f}  {ratio:>14}  {f'<= {target}x':>8}  {met}")


# --- the run -----------------------------------------------------------------------------------


def bench_layer(
    layer: str,
    tiles: list[Tile],
    tipg_template: str,
    api: str,
    pg: str,
    args: argparse.Namespace,
    target: float,
    deadline: Deadline,
    key: str,
) -> LayerRun:
    c = args.concurrency
    auth = auth_lines(key)
    # a fixed shuffle: a pass of a few seconds then sees every zoom in its share (in zoom
    # order it would see the few heaviest tiles only), the same order for every case
    tiles = random.Random(42).sample(tiles, len(tiles))
    tipg_urls = [fill(tipg_template, t) for t in tiles]
    mapsvc_urls = [fill(f"{api}/vtile/{layer}/{{z}}/{{x}}/{{y}}.pbf", t) for t in tiles]
    nocache_urls = [f"{u}?nocache=1" for u in mapsvc_urls]
    keep_all = quote(KEEP_ALL[layer])
    filtered_urls = [f"{u}&filter-lang=cql2-text&filter={keep_all}" for u in nocache_urls]
    sql = tile_sql(pg, layer, args.max_features)
    print(f"{layer}: warm-up passes (every tile decoded; fills mapsvc's cache) ...", flush=True)
    check = {
        "tipg": http_pass(tipg_urls, c, deadline, decode=True),
        "mapsvc uncached": http_pass(nocache_urls, c, deadline, decode=True, auth=auth),
        "mapsvc": http_pass(mapsvc_urls, c, deadline, decode=True, auth=auth),
    }
    postgis_pass(pg, sql, tiles[:: max(1, len(tiles) // 100)], c, deadline)
    run = LayerRun(
        layer,
        tiles,
        WrkCase(f"tipg --workers {args.workers}"),
        WrkCase("mapsvc uncached (nocache=1)"),
        WrkCase("mapsvc cached (HIT)"),
        WrkCase("PostGIS alone (same SQL, no HTTP)"),
        WrkCase(f"mapsvc uncached, filter={KEEP_ALL[layer]!r}"),
        target,
        check,
    )
    print(f"{layer}: measuring ...", flush=True)
    secs, headers = args.seconds, auth_headers(key)
    measure(
        [
            (run.tipg, lambda: wrk_pass(tipg_urls, args, {}, secs)),
            (run.uncached, lambda: wrk_pass(nocache_urls, args, headers, secs)),
            (run.cached, lambda: wrk_pass(mapsvc_urls, args, headers, secs)),
            (run.postgis, lambda: measured(postgis_pass(pg, sql, tiles, c, deadline, secs))),
            (run.filtered, lambda: wrk_pass(filtered_urls, args, headers, secs)),
        ],
        args.passes,
        deadline,
    )
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers of each server")
    parser.add_argument("--concurrency", type=int, default=16, help="client requests in flight")
    parser.add_argument("--passes", type=int, default=3, help="measured passes per case")
    parser.add_argument("--points", type=int, default=500_000, help="rows of bench_points")
    parser.add_argument("--points-zooms", default="3-5", help="zooms of the points tiles")
    parser.add_argument("--countries-zooms", default="0-5", help="zooms of the countries tiles")
    parser.add_argument("--max-features", type=int, default=20000, help="cap per tile (both)")
    parser.add_argument("--seconds", type=int, default=10, help="of each wrk pass")
    parser.add_argument("--wrk-threads", type=int, default=2, help="wrk's threads")
    parser.add_argument("--geojson-runs", type=int, default=30, help="of the bare query")
    parser.add_argument("--geojson-seconds", type=int, default=5, help="of each GeoJSON wrk run")
    parser.add_argument(
        "--cases", default="countries,points,geojson", help="which of them to measure"
    )
    add_pg_argument(parser)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/7", help="flushed first")
    parser.add_argument(
        "--tipg-venv",
        type=Path,
        default=Path(tempfile.gettempdir()) / "mapsvc-bench" / "tipg-venv",
        help="made and installed when missing, reused otherwise",
    )
    parser.add_argument("--timeout-s", type=float, default=1800, help="bound of the whole run")
    parser.add_argument("--keep-db", action="store_true", help=f"leave {BENCH_DB} in place")
    args = parser.parse_args()
    check_loopback(args.pg, "--pg")
    check_loopback(args.redis, "--redis")
    pg = args.pg.rstrip("/")
    deadline = Deadline(args.timeout_s)
    # a SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so the servers are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))

    def zooms(text_: str) -> tuple[int, int]:
        low, _, high = text_.partition("-")
        return int(low), int(high or low)

    work = Path(tempfile.mkdtemp(prefix="mapsvc-bench-vector-"))
    key = admin_key()  # mapsvc's; tipg ignores the header
    with ExitStack() as stack, httpx.Client(headers=auth_headers(key)) as client:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        versions = tipg_venv(args.tipg_venv, deadline)
        if args.keep_db:
            stack.callback(print, f"database {BENCH_DB} kept (--keep-db)")
        else:  # registered before the servers start: runs after they stopped
            stack.callback(drop_database, pg, BENCH_DB)
            stack.callback(print, f"dropping database {BENCH_DB}")
        about_db = make_bench_db(pg, args.points, seed=0.42)
        countries_tiles = zoom_tiles(*zooms(args.countries_zooms))
        points_tiles = zoom_tiles(*zooms(args.points_zooms))
        crowded = most_points_per_tile(pg, points_tiles[0][0])
        if crowded > args.max_features:
            print(
                f"note: a z{points_tiles[0][0]} tile holds up to ~{crowded} points, more than the"
                f" cap {args.max_features}: the servers may keep different points there"
            )
        tipg, tipg_base = start_tipg(
            stack, args.tipg_venv, pg, args.workers, args.max_features, work, client, deadline
        )
        mapsvc, api = start_mapsvc(
            stack, pg, args.redis, args.workers, args.max_features, work, client, deadline, key
        )
        print(about_db)
        print(
            f"servers: tipg and mapsvc each under `uvicorn --workers {args.workers}` (uvloop,"
            " httptools, no access log); both: MVT extent 4096, buffer 64, clipped, at most"
            f" {args.max_features} features per tile; client: wrk, {args.concurrency} connections"
            f" (keep-alive, Accept-Encoding: gzip); {args.passes} passes per case;"
            f" {os.cpu_count()} CPUs"
        )
        print(f"tipg: {versions}; {tipg_tile_template(client, tipg_base, COUNTRIES)}")
        print(f"mapsvc: {api}/vtile/{COUNTRIES}/{{z}}/{{x}}/{{y}}.pbf; Redis {args.redis}")
        print(f"most points in one z{points_tiles[0][0]} tile (with the buffer): ~{crowded}")
        print(f"load average (1, 5, 15 min) before measuring: {load_average()}", flush=True)

        cases = {c.strip() for c in args.cases.split(",")}
        runs = [
            bench_layer(
                layer,
                tiles,
                tipg_tile_template(client, tipg_base, layer),
                api,
                pg,
                args,
                3.0,
                deadline,
                key,
            )
            for layer, tiles, name in (
                (COUNTRIES, countries_tiles, "countries"),
                (POINTS, points_tiles, "points"),
            )
            if name in cases
        ]
        geojson = None
        if "geojson" in cases:
            print("GeoJSON: measuring ...", flush=True)
            geojson = measure_geojson(client, pg, api, tipg_base, args, key, deadline)
        for server in (tipg, mapsvc):
            server.check()

        print(
            f"\n=== results: tipg vs mapsvc, both `uvicorn --workers {args.workers}`; wrk"
            f" -t{args.wrk_threads} -c{args.concurrency} -d{args.seconds}s, Accept-Encoding: gzip,"
            f" the tiles cycled; tiles/s, p50, p99: medians of {args.passes} passes ==="
        )
        print(
            "PostGIS alone: mapsvc's tile SQL over as many psycopg connections, prepared and"
            " planned generically as mapsvc runs it, tiles not gzipped, no HTTP; the reference"
            f" of the {POSTGIS_TARGET:.0%} goal"
        )
        for run in runs:
            print_layer(run)
        if geojson is not None:
            print_geojson(geojson)
        for run in runs:
            print_checks(run)
        print("\ngoals (issue 13):")
        for run in runs:
            name = run.layer.removeprefix("public.")
            goal(
                f"uncached {name} tiles/s vs tipg's",
                run.uncached.rate / run.tipg.rate,
                run.target,
                "x tipg",
            )
            goal(
                f"uncached {name} tiles/s vs PostGIS alone",
                run.uncached.rate / run.postgis.rate,
                POSTGIS_TARGET,
                "x PostGIS",
            )
        if geojson is not None:
            goal(
                "GeoJSON of all countries, ms vs the bare query's",
                geojson.ms["mapsvc"] / geojson.ms["bare"],
                1.2,
                "x bare SQL",
                at_most=True,
            )
        print(f"\nload average (1, 5, 15 min) at the end: {load_average()}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
