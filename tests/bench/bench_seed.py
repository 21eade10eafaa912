"""Benchmark: seeding with metatiles against tile-by-tile rendering, same layers, zooms, code.

Run from the checkout with ``.venv/bin/python -m tests.bench.bench_seed`` (``make bench`` runs
it; Redis and PostgreSQL must be running: ``bash deploy/services.sh``). In one run, in one
process, three layers:

- the demo countries, filled, outlined and named (13 px labels: a style that draws vectors and
  text), zooms 0-5, from a table of a database made for the run (PostGIS, as a map of our data
  reads it: a query per render) and from the shapefile (read from disk);
- the Landsat scene of the demo data (``single/RGB.byte.tif``), configured in a temporary work
  dir in-process as the job does (a raster Mapnik reprojects), zooms 8-12.

The chunks of a pre-tiling plan of each (the footprint's tiles, as the job plans them) are
rendered and stored by the pre-tiling runner's own code (``PretileRunner._render_tiles``, a
file tile cache, ``nocache``), once drawing each chunk as metatiles (``MAPSVC_METATILE_SIZE``
8, buffer 128 px, none for the raster) and once tile by tile (size 1: ``render_tile`` per tile,
what a seed with ``MAPSVC_METATILE_SIZE=1`` does), in turn, ``--passes`` times; every run
stores every planned tile (checked). Each pass starts cold: no tile cached, and no tile of one
colour kept encoded from the pass before (both modes reuse those within a pass, as a worker
does). The queue, Redis counters and worker processes around a chunk cost both modes the same
and are left out: this is the rendering side of a seed, per process.

The goal (issue 25): tiles per second with metatiles at least twice tile-by-tile's, the median
of the per-pass ratios, for each layer of countries. Each pass prints its CPU seconds too (the
process's, writer thread included): on a machine busy with other work, their ratio moves less
than the wall clock's. The raster is measured for the record: raster layers are seeded tile by
tile (a metatile gains them nothing), so it has no goal.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy import create_engine

from shared.demo import COUNTRIES_TABLE, DEMO_DATA, load_countries
from shared.tiles.metatile import Metatiling
from shared.tiles.pretile import Chunk, chunks, plan_pretile
from shared.tiles.pretile_run import PretileJob, PretileRunner
from shared.tiles.render import TileRenderer
from shared.tiles.store import FileTileStore
from shared.tiles.styles import read_style
from tests.bench._harness import (
    add_pg_argument,
    admin_key,
    check_loopback,
    configure_scene,
    drop_database,
    fresh_database,
    goal,
    load_average,
    service_settings,
)
from tests.styles import write_countries

SCENE = DEMO_DATA / "raster" / "single" / "RGB.byte.tif"
DATABASE = "mapsvc_bench_seed"
GOAL = 2.0


def seed(
    runner: PretileRunner, job: PretileJob, store: FileTileStore, planned: list[Chunk]
) -> tuple[float, float, dict[str, int]]:
    """Seconds (wall clock, and the process's CPU) to render and store every chunk of
    ``planned``; what the chunks counted."""
    counts = {"rendered": 0, "skipped": 0, "empty": 0, "cancelled": 0}
    t0, cpu0 = time.perf_counter(), time.process_time()
    for chunk in planned:
        error = runner._render_tiles(chunk, job, store, counts)
        if error is not None:
            raise RuntimeError(error)
    return time.perf_counter() - t0, time.process_time() - cpu0, counts


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
    """Both modes over ``case``'s plan, in turn, ``passes`` times: the per-pass ratios."""
    plan = plan_pretile(case.bounds, case.zooms[0], case.zooms[1] + 1, cap=10**9)
    planned = list(chunks(case.bounds, plan))
    store = FileTileStore(cache)
    modes = {
        f"metatiles {size}x{size}": (case.meta_style or case.style, Metatiling(size, buffer)),
        "tile by tile": (case.style, Metatiling(1, 0)),
    }
    print(
        f"\n{case.name}, zooms {case.zooms[0]}-{case.zooms[1]}: {plan['total']} tiles in"
        f" {len(planned)} chunks; {passes} passes per mode, in turn; one process"
    )
    rates: dict[str, list[float]] = {name: [] for name in modes}
    cpu: dict[str, list[float]] = {name: [] for name in modes}
    with TileRenderer(case.mapnik_dir) as renderer:
        runs = {
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
        for runner, job in runs.values():
            seed(runner, job, store, planned[:4])  # the map loaded, untimed
        for i in range(passes):
            for name, (runner, job) in runs.items():
                # cold: no tile cached, no one-colour tile's bytes kept from the pass before
                shutil.rmtree(cache / job.style, ignore_errors=True)
                renderer.solid.clear()
                seconds, cpu_s, counts = seed(runner, job, store, planned)
                stored = sum(1 for _ in (cache / job.style).rglob("*.png"))
                if counts["rendered"] != plan["total"] or stored != plan["total"]:
                    raise RuntimeError(f"{name}: {counts}, {stored} stored, plan {plan}")
                rates[name].append(plan["total"] / seconds)
                cpu[name].append(cpu_s)
                print(
                    f"  pass {i + 1}/{passes} {name}: {plan['total']} tiles"
                    f" ({counts['empty']} empty) in {seconds:.2f} s (CPU {cpu_s:.2f} s),"
                    f" {rates[name][-1]:.1f} tiles/s"
                )
    meta, single = (rates[name] for name in modes)
    ratios = [m / s for m, s in zip(meta, single, strict=True)]
    meta_cpu, single_cpu = (cpu[name] for name in modes)
    cpu_ratios = [s / m for m, s in zip(meta_cpu, single_cpu, strict=True)]
    for name, values in rates.items():
        print(f"  {name:28} {statistics.median(values):9.1f} tiles/s (median)")
    print(f"  per pass: {', '.join(f'{r:.2f}x' for r in ratios)}")
    print(f"  per pass, by CPU seconds: {', '.join(f'{r:.2f}x' for r in cpu_ratios)}")
    return ratios


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
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/8", help="for the layer's job")
    add_pg_argument(parser)
    parser.add_argument("--keep", action="store_true", help="keep the temporary work dir")
    args = parser.parse_args()
    check_loopback(args.redis, "--redis")
    check_loopback(args.pg, "--pg")
    pg = args.pg.rstrip("/")
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]

    work = Path(tempfile.mkdtemp(prefix="mapsvc-bench-seed-"))
    try:
        _, settings = service_settings(admin_key(), work, MAPSVC_REDIS_URL=args.redis)
        landsat = configure_scene(settings, SCENE, "bench/landsat.tif")
        _, labelled = write_countries(work / "shape")
        _, in_postgis = write_countries(work / "postgis", postgis_countries(pg))
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
        print(f"load average (1, 5, 15 min) before: {load_average()}")
        ratios = {
            c.name: measure(c, work / "cache", args.passes, args.size, args.buffer) for c in cases
        }
        print(f"\nload average (1, 5, 15 min) at the end: {load_average()}")
        print("\ngoal (issue 25, medians of the per-pass ratios):")
        for case in cases:
            what = f"metatiles vs per-tile seeding: {case.label} z{case.zooms[0]}-{case.zooms[1]}"
            ratio = statistics.median(ratios[case.name])
            if case.meta_style is None:
                goal(what, ratio, GOAL, "x")
            else:  # a raster, forced into metatiles: seeded tile by tile, no goal
                print(f"{what:58} {ratio:8.2f} x (rasters are seeded tile by tile)")
    finally:
        drop_database(pg, DATABASE)
        if args.keep:
            print(f"work dir (kept): {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
