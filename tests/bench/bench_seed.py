"""Benchmark: seeding with metatiles against tile-by-tile rendering, same layers, zooms, code.

Run from the checkout with ``.venv/bin/python -m tests.bench.bench_seed`` (``make bench`` runs
it; Redis and PostgreSQL must be running: ``bash deploy/services.sh``). Two measures, each of
both modes in turn, ``--passes`` times.

**One process, the rendering side of a seed.** Three layers:

- the demo countries, filled, outlined and named (13 px labels: a style that draws vectors and
  text), zooms 0-5, from a table of a database made for the run (PostGIS, as a map of our data
  reads it: a query per render) and from the shapefile (read from disk);
- the Landsat scene of the demo data (``single/RGB.byte.tif``), configured in a temporary work
  dir in-process as the job does (a raster Mapnik reprojects), zooms 8-12.

The chunks of a pre-tiling plan of each (the footprint's tiles, as the job plans them) are
rendered and stored by the pre-tiling runner's own code (``PretileRunner._render_tiles``, a
file tile cache, ``nocache``), once drawing each chunk as metatiles (``MAPSVC_METATILE_SIZE``
8, buffer 128 px, none for the raster) and once tile by tile (size 1: ``render_tile`` per tile,
what a seed with ``MAPSVC_METATILE_SIZE=1`` does); every run stores every planned tile
(checked), in this process, its memory held as a worker process holds it (``shared/memory.py``).
Each pass starts cold: a cache folder of its own, and no tile of one colour kept encoded from
the pass before (both modes reuse those within a pass, as a worker does). The queue, Redis
counters and worker processes around a chunk are left out here.

**A real run.** The API and a worker (``-c`` one process per CPU) run as real processes on a
flushed Redis db; a pre-tiling run of the PostGIS countries over the world, zooms 0-7 (21,845
tiles, ``nocache=1``) goes through the API, once with a worker at ``MAPSVC_METATILE_SIZE`` 8
and once at 1 (a worker started for each); its tiles per second are the job's own figure.

Each pass prints its CPU seconds too, the process's and the machine's (every process's:
PostgreSQL answering the queries, the writer threads): on a machine busy with other work,
their ratios move less than the wall clock's.

The goal (issue 25): tiles per second with metatiles at least twice tile-by-tile's, the median
of the per-pass ratios, for the PostGIS countries, both measures. The shapefile and the raster
are measured for the record: a shapefile of 177 coarse polygons costs a render almost nothing
to read, so there is little for a metatile to share (its figure is what drawing and encoding
alone gain); raster layers are seeded tile by tile (a metatile gains them nothing).

The work dir (styles, tile caches, the real run's service) is made on a tmpfs by default
(``/dev/shm``; ``--work-base`` to choose). The project machine's disk is ext4 without a journal,
whose inode allocator passes over every inode removed in the last minutes (``recently_deleted``,
seen with ``perf``): after a mass removal (a test run, a pass before) creating a file costs it
about 1 ms of kernel time instead of 20 us, a cost of that disk that both modes pay for every
tile they store, and which would hide what rendering gains.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from sqlalchemy import create_engine

from shared.demo import COUNTRIES_TABLE, DEMO_DATA, load_countries
from shared.memory import keep_image_memory
from shared.redis_clients import sync_client
from shared.seeding.plan import Chunk, chunks, plan_pretile
from shared.seeding.pretile_run import PretileJob, PretileRunner
from shared.tiles.metatile import Metatiling
from shared.tiles.render import TileRenderer
from shared.tiles.store import FileTileStore
from shared.tiles.styles import read_style
from tests.bench._harness import (
    Deadline,
    Server,
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
)
from tests.bench.bench_tiles import CLI, ROOT, wait_worker
from tests.styles import write_countries

SCENE = DEMO_DATA / "raster" / "single" / "RGB.byte.tif"
DATABASE = "mapsvc_bench_seed"
GOAL = 2.0
#: the zooms of the real run (the world: 21,845 tiles)
RUN_ZOOMS = (0, 7)
#: where the work dir goes by default (see the module's docstring)
TMPFS = Path("/dev/shm")


def machine_cpu_s() -> float:
    """CPU seconds the machine has used since it started, every process's (``/proc/stat``):
    the database server's queries are part of a seed's cost."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    idle, iowait = ticks[3], ticks[4]
    return (sum(ticks) - idle - iowait) / os.sysconf("SC_CLK_TCK")


@dataclass
class Pass:
    """One mode's run over a plan: seconds of wall clock, of the process's CPU and of the
    machine's; tiles per second."""

    wall_s: float
    cpu_s: float
    machine_s: float
    tiles_per_s: float


def seed(
    runner: PretileRunner, job: PretileJob, store: FileTileStore, planned: list[Chunk]
) -> tuple[Pass, dict[str, int]]:
    """Render and store every chunk of ``planned``: the pass's figures, what the chunks
    counted."""
    counts = {"rendered": 0, "skipped": 0, "empty": 0, "cancelled": 0}
    t0, cpu0, machine0 = time.perf_counter(), time.process_time(), machine_cpu_s()
    for chunk in planned:
        error = runner._render_tiles(chunk, job, store, counts)
        if error is not None:
            raise RuntimeError(error)
    wall_s = time.perf_counter() - t0
    tiles = counts["rendered"] + counts["skipped"]
    cpu_s, machine_s = time.process_time() - cpu0, machine_cpu_s() - machine0
    return Pass(wall_s, cpu_s, machine_s, tiles / wall_s), counts


@dataclass
class Case:
    """A layer seeded both ways: its styles' folder, its id, its footprint, its zooms."""

    name: str
    label: str
    mapnik_dir: Path
    style: str
    bounds: list[float]
    zooms: tuple[int, int]
    #: the style drawn by metatiles, when not ``style`` (a raster's, with its ``metatile``
    #: parameter: without it a raster is drawn tile by tile)
    meta_style: str | None = None


def measure(case: Case, cache: Path, passes: int, size: int, buffer: int) -> list[float]:
    """Both modes over ``case``'s plan, in turn, ``passes`` times: the per-pass ratios of
    tiles per second."""
    plan = plan_pretile(case.bounds, case.zooms[0], case.zooms[1] + 1, cap=10**9)
    planned = list(chunks(case.bounds, plan))
    modes = {
        f"metatiles {size}x{size}": (case.meta_style or case.style, Metatiling(size, buffer)),
        "tile by tile": (case.style, Metatiling(1, 0)),
    }
    print(
        f"\n{case.name}, zooms {case.zooms[0]}-{case.zooms[1]}: {plan['total']} tiles in"
        f" {len(planned)} chunks; {passes} passes per mode, in turn; one process"
    )
    runs: dict[str, list[Pass]] = {name: [] for name in modes}
    with TileRenderer(case.mapnik_dir) as renderer:
        runners = {
            name: (
                PretileRunner(
                    None,  # type: ignore[arg-type]  # _render_tiles needs no job store
                    renderer,
                    None,  # type: ignore[arg-type]
                    max_tiles=plan["total"],
                    lock_ttl_s=60,
                    metatiling=metatiling,
                ),
                PretileJob("bench", style, "en", refresh=True, s3=False),
            )
            for name, (style, metatiling) in modes.items()
        }
        for runner, job in runners.values():
            seed(runner, job, FileTileStore(cache / "warm"), planned[:4])  # the map loaded
        for i in range(passes):
            for m, (name, (runner, job)) in enumerate(runners.items()):
                # cold: a cache folder of its own (no tile cached, and none removed meanwhile:
                # see the module's docstring), no one-colour tile's bytes kept from before
                folder = cache / f"pass-{i}-{m}"
                renderer.solid.clear()
                run, counts = seed(runner, job, FileTileStore(folder), planned)
                stored = sum(1 for _ in folder.rglob("*.png"))
                if counts["rendered"] != plan["total"] or stored != plan["total"]:
                    raise RuntimeError(f"{name}: {counts}, {stored} stored, plan {plan}")
                runs[name].append(run)
                print(
                    f"  pass {i + 1}/{passes} {name}: {plan['total']} tiles"
                    f" ({counts['empty']} empty) in {run.wall_s:.2f} s (CPU: the process's"
                    f" {run.cpu_s:.2f} s, the machine's {run.machine_s:.2f} s),"
                    f" {run.tiles_per_s:.1f} tiles/s"
                )
    shutil.rmtree(cache, ignore_errors=True)
    return report(runs, ("tiles/s", "the process's CPU seconds", "the machine's CPU seconds"))


def report(runs: dict[str, list[Pass]], measures: tuple[str, ...]) -> list[float]:
    """Print each mode's median rate and the per-pass ratios (metatiles over tile by tile) by
    ``measures``; the ratios of tiles per second."""
    meta, single = runs.values()
    pairs = list(zip(meta, single, strict=True))
    for name, values in runs.items():
        rate = statistics.median(r.tiles_per_s for r in values)
        print(f"  {name:28} {rate:9.1f} tiles/s (median)")
    for what in measures:
        ratios = ", ".join(f"{_RATIOS[what](m, s):.2f}x" for m, s in pairs)
        print(f"  per pass, by {what}: {ratios}")
    return [_RATIOS["tiles/s"](m, s) for m, s in pairs]


#: how much metatiles gain (the first pass) over tile by tile (the second), by each measure
_RATIOS = {
    "tiles/s": lambda meta, single: meta.tiles_per_s / single.tiles_per_s,
    "the process's CPU seconds": lambda meta, single: single.cpu_s / meta.cpu_s,
    "the machine's CPU seconds": lambda meta, single: single.machine_s / meta.machine_s,
}


class RealRuns:
    """Pre-tiling runs of one layer through the API started here, on a worker started for each
    (every CPU), with the metatile side it is given; their tiles per second.

    Args:
        stack: stops the API with it.
        work: the service's work dir, made.
        datasource: Mapnik's parameters of the countries (the layer is their named style).
        redis_url: the service's Redis db (flushed by the caller).
        deadline: of the whole benchmark.
    """

    def __init__(
        self,
        stack: ExitStack,
        work: Path,
        datasource: dict[str, str],
        redis_url: str,
        deadline: Deadline,
    ) -> None:
        key = admin_key()
        self.env, settings = service_settings(
            key,
            work,
            MAPSVC_REDIS_URL=redis_url,
            MAPSVC_HOST="127.0.0.1",
            MAPSVC_LOG_LEVEL="WARNING",
            MAPSVC_API_WORKERS="1",
        )
        _, self.style = write_countries(settings.dirs.mapnik, datasource)
        self.redis_url, self.deadline, self.logs = redis_url, deadline, work / "logs"
        self.logs.mkdir(exist_ok=True)
        self.client = stack.enter_context(httpx.Client(headers=auth_headers(key)))
        api = start(stack, "mapsvc API", [*CLI, "serve"], self.logs / "api.log", self.env, ROOT)
        self.api = f"http://127.0.0.1:{settings.port}/api-user"
        wait_http(self.client, f"{self.api}/health", [api], deadline, 120)

    def run(self, size: int) -> Pass:
        """One run of :data:`RUN_ZOOMS` (``nocache=1``) on a worker at ``MAPSVC_METATILE_SIZE``
        ``size``: its figures (the job's own tiles per second; no process CPU: the work is the
        worker's)."""
        processes = os.cpu_count() or 1
        with ExitStack() as stack:
            env = {**self.env, "MAPSVC_METATILE_SIZE": str(size)}
            argv = [*CLI, "worker", "-c", str(processes)]
            log = self.logs / f"worker-{size}.log"
            worker = start(stack, "mapsvc worker", argv, log, env, ROOT)
            wait_worker(self.redis_url, worker, processes, self.deadline)
            params = {"minzoom": RUN_ZOOMS[0], "maxzoom": RUN_ZOOMS[1] + 1, "nocache": 1}
            t0, machine0 = time.perf_counter(), machine_cpu_s()
            url = f"{self.api}/gis-layer-pretile/{self.style}"
            response = self.client.get(url, params={**params, "async": 1}, timeout=60)
            if response.status_code != 202:
                raise RuntimeError(f"{url}: {response.status_code} {response.text[:300]}")
            job = self._ended(response.json()["id"], worker)
            wall_s, machine_s = time.perf_counter() - t0, machine_cpu_s() - machine0
        result = job.get("result") or {}
        planned = (result.get("plan") or {}).get("total")
        if job["state"] != "succeeded" or result.get("rendered") != planned:
            raise RuntimeError(f"the run did not render its plan: {job}")
        return Pass(wall_s, 0.0, machine_s, float(result["tiles_per_s"]))

    def _ended(self, job_id: str, worker: Server) -> dict[str, Any]:
        """The record of job ``job_id`` once it has ended."""
        end = time.monotonic() + self.deadline.left(900)
        while time.monotonic() < end:
            job: dict[str, Any] = self.client.get(f"{self.api}/jobs/{job_id}", timeout=10).json()
            if job["state"] in ("succeeded", "failed", "cancelled"):
                return job
            worker.check()
            time.sleep(0.2)
        raise TimeoutError(f"the run {job_id} did not end within 900 s")


def real_runs(runs: RealRuns, passes: int, size: int) -> list[float]:
    """Both modes of :class:`RealRuns`, in turn, ``passes`` times: the per-pass ratios of tiles
    per second."""
    print(
        f"\na real run: the PostGIS countries, zooms {RUN_ZOOMS[0]}-{RUN_ZOOMS[1]}, through the"
        f" API, on a worker of {os.cpu_count()} processes; {passes} passes per mode, in turn"
    )
    modes = {f"metatiles {size}x{size}": size, "tile by tile": 1}
    figures: dict[str, list[Pass]] = {name: [] for name in modes}
    for i in range(passes):
        for name, side in modes.items():
            run = runs.run(side)
            figures[name].append(run)
            print(
                f"  pass {i + 1}/{passes} {name}: {run.tiles_per_s:.1f} tiles/s (the job's),"
                f" {run.wall_s:.2f} s from the request to its end, the machine's CPU"
                f" {run.machine_s:.2f} s"
            )
    return report(figures, ("tiles/s", "the machine's CPU seconds"))


def with_metatiles(mapnik_dir: Path, style: str, size: int) -> str:
    """A copy of ``style`` beside it with a ``metatile`` parameter of ``size``: its id."""
    xml = (mapnik_dir / f"{style}.xml").read_text()
    param = f'<Parameters>\n    <Parameter name="metatile">{size}</Parameter>'
    (mapnik_dir / f"{style}-meta.xml").write_text(xml.replace("<Parameters>", param, 1))
    return f"{style}-meta"


def postgis_countries(pg: str) -> dict[str, str]:
    """The demo countries loaded into database :data:`DATABASE` (made afresh) of the server
    ``pg``: Mapnik's parameters of that table."""
    engine = create_engine(fresh_database(pg, DATABASE))
    try:
        load_countries(engine, DEMO_DATA)
    finally:
        engine.dispose()
    url = urlsplit(pg)
    params = {"type": "postgis", "host": url.hostname or "127.0.0.1", "dbname": DATABASE}
    params |= {"port": str(url.port or 5432), "user": url.username or "postgres"}
    if url.password:
        params["password"] = url.password
    params |= {"table": COUNTRIES_TABLE, "geometry_field": "geom", "srid": "4326"}
    return params | {"extent": "-180,-90,180,90"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=3, help="runs of each mode")
    parser.add_argument("--size", type=int, default=8, help="metatile side, in tiles")
    parser.add_argument("--buffer", type=int, default=128, help="metatile buffer, in pixels")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/8", help="flushed first")
    add_pg_argument(parser)
    parser.add_argument(
        "--work-base",
        type=Path,
        default=TMPFS if TMPFS.is_dir() else None,
        help="where the work dir is made (default: /dev/shm, a tmpfs, when there is one)",
    )
    parser.add_argument("--timeout-s", type=float, default=1800)
    parser.add_argument("--keep", action="store_true", help="keep the temporary work dir")
    args = parser.parse_args()
    check_loopback(args.redis, "--redis")
    check_flushable(args.redis)
    check_loopback(args.pg, "--pg")
    pg = args.pg.rstrip("/")
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]

    keep_image_memory()  # as a worker process does (shared/memory.py)
    deadline = Deadline(args.timeout_s)
    work = Path(tempfile.mkdtemp(prefix="mapsvc-bench-seed-", dir=args.work_base))
    redis = sync_client(args.redis)
    redis.flushdb()
    try:
        _, settings = service_settings(admin_key(), work, MAPSVC_REDIS_URL=args.redis)
        landsat = configure_scene(settings, SCENE, "bench/landsat.tif")
        _, labelled = write_countries(work / "shape")
        table = postgis_countries(pg)
        _, in_postgis = write_countries(work / "postgis", table)
        world = [-180.0, -85.0, 180.0, 85.0]
        cases = [
            Case(
                "countries, named: PostGIS",
                "PostGIS countries",
                work / "postgis",
                in_postgis,
                world,
                (0, 5),
            ),
            Case(
                "countries, named: shapefile",
                "shapefile countries",
                work / "shape",
                labelled,
                world,
                (0, 5),
            ),
            Case(
                f"{SCENE.name}: a raster Mapnik reprojects",
                "Landsat raster",
                settings.dirs.mapnik,
                landsat,
                read_style(settings.dirs.mapnik, landsat).footprint,
                (8, 12),
                with_metatiles(settings.dirs.mapnik, landsat, args.size),
            ),
        ]
        print(f"work dir in {work.parent}; load average (1, 5, 15 min) before: {load_average()}")
        ratios = {
            c.name: measure(c, work / "cache", args.passes, args.size, args.buffer) for c in cases
        }
        with ExitStack() as stack:
            runs = RealRuns(stack, work / "service", table, args.redis, deadline)
            real = real_runs(runs, args.passes, args.size)
        print(f"\nload average (1, 5, 15 min) at the end: {load_average()}")
        print("\ngoal (issue 25, medians of the per-pass ratios):")
        for case in cases:
            zooms = f"z{case.zooms[0]}-{case.zooms[1]}"
            what = f"metatiles vs per-tile: {case.label} {zooms}, one process"
            ratio = statistics.median(ratios[case.name])
            if case is cases[0]:
                goal(what, ratio, GOAL, "x")
            elif case.meta_style is None:  # a shapefile: for the record
                print(f"{what:58} {ratio:8.2f} x (little to share: see the docstring)")
            else:  # a raster, forced into metatiles: seeded tile by tile, no goal
                print(f"{what:58} {ratio:8.2f} x (rasters are seeded tile by tile)")
        what = f"metatiles vs per-tile: a real run, PostGIS countries z0-{RUN_ZOOMS[1]}"
        goal(what, statistics.median(real), GOAL, "x")
    finally:
        redis.flushdb()
        redis.close()
        drop_database(pg, DATABASE)
        if args.keep:
            print(f"work dir (kept): {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
