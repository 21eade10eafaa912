"""OGC API against our own routes on the same layers: items vs GeoJSON, tiles vs rtile/vtile.

    .venv/bin/python -m tests.bench.bench_ogc [--seconds 10] [--connections 8] [--passes 3]

PostgreSQL with PostGIS and Redis must be running (``bash deploy/services.sh``). In one run, a
database of its own, ``mapsvc_bench_ogc`` (made afresh, dropped at the end), holds
``public.countries`` (the Natural Earth countries) and ``public.bench_points`` (random points
made by ``generate_series``); the Landsat scene of the demo data is configured as a raster
layer; mapsvc's API runs alone (no front) as ``mapsvc serve`` starts it, 2 processes, with a
Redis db of its own (flushed first) and a random admin key that every request carries. Then,
each case's answers checked first with a Python client (the same features, the same tile
bytes), ``wrk`` drives each pair of cases in turn, ``--passes`` times (medians):

- items: pages of ``/ogc/collections/<layer>/items?limit=&offset=`` against the same pages of
  ``/geojson/<layer>?limit=&offset=``, for both tables, as a client asks them (whatever cache
  each uses);
- raster tiles: the scene's tiles at z8-12, cached, as ``/ogc/collections/<layer>/tiles/
  WebMercatorQuad/{z}/{y}/{x}.png`` and as ``/rtile/<layer>/en/{z}/{x}/{y}.png``;
- vector tiles: the countries' tiles at z0-5, cached, as ``…/tiles/WebMercatorQuad/{z}/{y}/
  {x}.mvt`` and as ``/vtile/public.countries/{z}/{x}/{y}.pbf`` (``Accept-Encoding: gzip``).

Goals (issue 24, "Speed"), printed with each ratio: an items page takes at most 1.2x the time
of the same GeoJSON page (req/s of /geojson over req/s of items <= 1.2); OGC tiles cost no more
than rtile/vtile (req/s >= 0.95x theirs: the same cache, the run's noise allowed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import morecantile
from sqlalchemy import create_engine, text

from api.cli import serve_argv
from shared.demo import DEMO_DATA, load_countries
from shared.redis_clients import sync_client
from tests.bench._harness import (
    Deadline,
    WrkCase,
    add_pg_argument,
    admin_key,
    auth_headers,
    check_flushable,
    check_loopback,
    configure_scene,
    drop_database,
    fresh_database,
    goal,
    load_average,
    service_settings,
    start,
    wait_http,
    wrk_rate,
)
from tests.bench.bench_tiles import scene_tiles

ROOT = Path(__file__).resolve().parents[2]
BENCH_DB = "mapsvc_bench_ogc"
SCENE = "single/RGB.byte.tif"
COUNTRIES, POINTS = "public.countries", "public.bench_points"
TMS = morecantile.tms.get("WebMercatorQuad")
#: the goals: an items page's time over a GeoJSON page's (at most); OGC tiles/s over ours
ITEMS_TARGET, TILES_TARGET = 1.2, 0.95


# --- the database ------------------------------------------------------------------------------


def make_db(pg: str, points: int) -> str:
    """The bench database made afresh with both tables; its SQLAlchemy URL."""
    url = fresh_database(pg, BENCH_DB)
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE EXTENSION postgis"))
        load_countries(engine, DEMO_DATA)
        with engine.begin() as conn:
            conn.execute(
                text(
                    "CREATE TABLE public.bench_points (id integer PRIMARY KEY, name text NOT NULL,"
                    " value double precision NOT NULL, geom geometry(Point, 4326) NOT NULL)"
                )
            )
            conn.execute(text("SELECT setseed(0.42)"))
            conn.execute(
                text(
                    "INSERT INTO public.bench_points SELECT i, 'point ' || i,"
                    " round((random() * 1000)::numeric, 2)::float8,"
                    " ST_SetSRID(ST_MakePoint(random() * 360 - 180, random() * 170 - 85), 4326)"
                    " FROM generate_series(1, :n) AS i"
                ),
                {"n": points},
            )
            conn.execute(text("CREATE INDEX ON public.bench_points USING gist (geom)"))
            conn.execute(text("ANALYZE public.bench_points"))
    finally:
        engine.dispose()
    return url


# --- the cases ---------------------------------------------------------------------------------


@dataclass
class Pair:
    """Two ways to the same answers: ours (the reference) and OGC API's, with the goal."""

    what: str
    ours: WrkCase
    ours_paths: list[str]
    ogc: WrkCase
    ogc_paths: list[str]
    check: Callable[[httpx.Client, str, str], None]  # one pair of paths: the same answer?

    def ratio(self) -> float:
        return self.ogc.rate / self.ours.rate


def same_tile(client: httpx.Client, ours: str, ogc: str) -> None:
    """Both paths answer the same tile bytes, from the cache."""
    a, b = client.get(ours), client.get(ogc)
    if a.status_code != b.status_code or a.content != b.content:
        raise RuntimeError(f"{ogc}: {b.status_code}, {len(b.content)} B; {ours}: {a.status_code}")
    if a.status_code == 200 and b.headers.get("x-cache") != "HIT":
        raise RuntimeError(f"{ogc}: X-Cache {b.headers.get('x-cache')}, not from the cache")


def same_features(client: httpx.Client, ours: str, ogc: str) -> None:
    """Both pages hold the same features (by their properties), in the same order."""
    pages = [client.get(path) for path in (ours, ogc)]
    for page in pages:
        if page.status_code != 200:
            raise RuntimeError(f"GET {page.url}: {page.status_code} {page.text[:300]}")
    a, b = (json.loads(page.content)["features"] for page in pages)
    if not a or [f["properties"] for f in a] != [f["properties"] for f in b]:
        raise RuntimeError(f"{ogc} and {ours} hold other features ({len(b)}, {len(a)})")


def item_pages(layer: str, limit: int, pages: int) -> tuple[list[str], list[str]]:
    """``pages`` pages of ``limit`` features: as GeoJSON, and as OGC API items."""
    offsets = [i * limit for i in range(pages)]
    query = [f"limit={limit}&offset={offset}" for offset in offsets]
    return (
        [f"/api-user/geojson/{layer}?{q}" for q in query],
        [f"/api-user/ogc/collections/{layer}/items?{q}" for q in query],
    )


def raster_paths(layer: str, tiles: Sequence[morecantile.Tile]) -> tuple[list[str], list[str]]:
    grid = f"/api-user/ogc/collections/{layer}/tiles/WebMercatorQuad"
    return (
        [f"/api-user/rtile/{layer}/en/{t.z}/{t.x}/{t.y}.png" for t in tiles],
        [f"{grid}/{t.z}/{t.y}/{t.x}.png" for t in tiles],
    )


def vector_paths(layer: str, tiles: Sequence[morecantile.Tile]) -> tuple[list[str], list[str]]:
    grid = f"/api-user/ogc/collections/{layer}/tiles/WebMercatorQuad"
    return (
        [f"/api-user/vtile/{layer}/{t.z}/{t.x}/{t.y}.pbf" for t in tiles],
        [f"{grid}/{t.z}/{t.y}/{t.x}.mvt" for t in tiles],
    )


def measure(
    pairs: Sequence[Pair], base: str, key: str, args: argparse.Namespace, deadline: Deadline
) -> None:
    """``--passes`` rounds over every case in turn, so that drift hits all alike."""
    headers = {**auth_headers(key), "Accept-Encoding": "gzip"}
    for i in range(args.passes):
        for pair in pairs:
            for case, paths in ((pair.ours, pair.ours_paths), (pair.ogc, pair.ogc_paths)):
                deadline.left()
                result = wrk_rate(
                    base, paths, headers=headers, seconds=args.seconds, connections=args.connections
                )
                case.passes.append(result)
                print(
                    f"  pass {i + 1}/{args.passes} {case.name:44} {result.rate:9.1f} req/s"
                    f" (p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms)",
                    flush=True,
                )


def report(pairs: Sequence[Pair]) -> None:
    print(f"\n{'case':48} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for pair in pairs:
        for case in (pair.ours, pair.ogc):
            p50, p99 = case.latency()
            print(f"{case.name:48} {case.rate:9.1f} {p50:8.2f} {p99:8.2f}")
    print("\ngoals (issue 24):")
    for pair in pairs:
        if pair.what.startswith("items"):
            # the time of a page, one at a time or many: 1 / rate at the same concurrency
            time = 1 / pair.ratio()
            goal(f"{pair.what}: time vs /geojson's", time, ITEMS_TARGET, "x geojson", at_most=True)
        else:
            goal(f"{pair.what}: req/s vs ours", pair.ratio(), TILES_TARGET, "x ours")


# --- the run -----------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10, help="of each wrk run")
    parser.add_argument("--connections", type=int, default=8, help="wrk's connections")
    parser.add_argument("--passes", type=int, default=3, help="wrk runs per case (medians)")
    parser.add_argument("--points", type=int, default=100_000, help="rows of bench_points")
    parser.add_argument("--page", type=int, default=50, help="features per page (both)")
    parser.add_argument("--pages", type=int, default=4, help="pages of each layer, cycled")
    parser.add_argument("--cases", default="items,raster,vector", help="which to measure")
    add_pg_argument(parser)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/7", help="flushed first")
    parser.add_argument("--timeout-s", type=float, default=1800, help="bound of the whole run")
    args = parser.parse_args()
    check_loopback(args.pg, "--pg")
    check_loopback(args.redis, "--redis")
    check_flushable(args.redis)
    if not shutil.which("wrk"):
        print("needs wrk (deploy/services.sh --test-tools)", file=sys.stderr)
        return 2
    cases = {c.strip() for c in args.cases.split(",")}
    pg = args.pg.rstrip("/")
    deadline = Deadline(args.timeout_s)
    # a SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so the server is stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    redis = sync_client(args.redis)
    redis.flushdb()
    redis.close()

    work = Path(tempfile.mkdtemp(prefix="mapsvc-bench-ogc-"))
    key = admin_key()
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        # registered before the server starts: runs after it stops
        stack.callback(drop_database, pg, BENCH_DB)
        env, settings = service_settings(
            key,
            work,
            MAPSVC_DATABASE_URL=make_db(pg, args.points),
            MAPSVC_REDIS_URL=args.redis,
            MAPSVC_HOST="127.0.0.1",
            MAPSVC_API_WORKERS="2",
            MAPSVC_ALLOWED_HOSTS="127.0.0.1,localhost",
            MAPSVC_LOG_LEVEL="WARNING",
        )
        scene = configure_scene(settings, DEMO_DATA / "raster" / SCENE, SCENE)
        server = start(stack, "api", serve_argv(settings), work / "api.log", env, ROOT)
        base = f"http://127.0.0.1:{settings.port}"
        pairs: list[Pair] = []
        with httpx.Client(base_url=base, timeout=120, headers=auth_headers(key)) as client:
            wait_http(client, f"{base}/api-user/health", [server], deadline, 120)
            if "items" in cases:
                for layer in (COUNTRIES, POINTS):
                    ours, ogc = item_pages(layer, args.page, args.pages)
                    name = layer.removeprefix("public.")
                    pairs.append(
                        Pair(
                            f"items {name}, {args.pages} pages of {args.page}",
                            WrkCase(f"/geojson/{name}?limit={args.page}&offset="),
                            ours,
                            WrkCase(f"OGC items {name}?limit={args.page}&offset="),
                            ogc,
                            same_features,
                        )
                    )
            if "raster" in cases:
                ours, ogc = raster_paths(scene, scene_tiles(settings.dirs.raster / SCENE, 8, 12))
                pairs.append(
                    Pair(
                        f"cached raster tiles ({len(ours)}, z8-12)",
                        WrkCase("/rtile .png (cached)"),
                        ours,
                        WrkCase("OGC tiles .png (cached)"),
                        ogc,
                        same_tile,
                    )
                )
            if "vector" in cases:
                ours, ogc = vector_paths(COUNTRIES, list(TMS.tiles(-180, -85, 180, 85, range(6))))
                pairs.append(
                    Pair(
                        f"cached vector tiles ({len(ours)}, countries z0-5)",
                        WrkCase("/vtile .pbf (cached)"),
                        ours,
                        WrkCase("OGC tiles .mvt (cached)"),
                        ogc,
                        same_tile,
                    )
                )
            for pair in pairs:  # fills the caches through our routes, then checks OGC's
                print(f"checking {pair.what} ...", flush=True)
                for path in pair.ours_paths:
                    if client.get(path).status_code not in (200, 204):
                        raise RuntimeError(f"GET {path}: not a tile or a page")
                for mine, theirs in zip(pair.ours_paths, pair.ogc_paths, strict=True):
                    deadline.left()
                    pair.check(client, mine, theirs)
                # one fixed shuffled order for both: a short run sees every zoom in its share
                order = random.Random(42).sample(range(len(pair.ours_paths)), len(pair.ours_paths))
                pair.ours_paths = [pair.ours_paths[i] for i in order]
                pair.ogc_paths = [pair.ogc_paths[i] for i in order]
        print(
            f"mapsvc API alone, 2 processes, {base}; layers {COUNTRIES}, {POINTS}"
            f" ({args.points} points), raster {scene} ({SCENE}); wrk -t2 -c{args.connections}"
            f" -d{args.seconds}s, Accept-Encoding: gzip, {args.passes} passes per case;"
            f" {os.cpu_count()} CPUs; load average before: {load_average()}",
            flush=True,
        )
        measure(pairs, base, key, args, deadline)
        server.check()
        report(pairs)
        print(f"\nload average (1, 5, 15 min) at the end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
