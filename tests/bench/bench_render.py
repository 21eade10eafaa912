"""Benchmark: rasters drawn with numpy (any data type, TiTiler's parameters) against TiTiler.

Run from the checkout with ``make bench`` (or ``.venv/bin/python -m tests.bench.bench_render``);
Redis and PostgreSQL must be running (``bash deploy/services.sh``). In one run, on this machine:

- two synthetic Cloud-Optimized GeoTIFFs are written to ``<tmp work dir>/map/raster/bench/``,
  over the same area (the Alps, ``--size`` pixels a side, the pixels of zoom 12):
  a Float32 DEM of smooth terrain (EPSG:4326, as DEMs are distributed; nodata -9999 over a
  lake and a corner) and a 4-band UInt16 scene (blue, green, red, near infrared by colour
  interpretation; EPSG:3857; nodata 0 over a corner);
- TiTiler and mapsvc are started as ``bench_tiles`` starts them (its helpers: TiTiler in a
  virtualenv of its own under ``uvicorn --workers N``; mapsvc's API with N render processes and
  a worker of N, on a Redis db of their own, db 9 by default, flushed first); mapsvc configures
  both rasters (``gis-raster``, resampling ``nearest`` as TiTiler draws), which computes their
  statistics and the scene's default 2–98 % stretch;
- the cases, each the same drawing asked of both servers:

  1. ``dem-colormap``: the DEM, ``rescale=<min>,<max>&colormap_name=terrain`` (its statistics'
     min and max);
  2. ``ndvi``: the scene, ``expression=(b4-b3)/(b4+b3)&rescale=-1,1&colormap_name=rdylgn``;
  3. ``u16-stretch``: the scene with no parameter on mapsvc (its default stretch, bands 3,2,1
     from their 2–98 % statistics) against TiTiler's ``bidx=3,2,1`` with those ``rescale``;
  4. ``hillshade`` and ``terrainrgb``: the DEM, ``algorithm=…`` on both (TiTiler's hillshade
     is its own formula, and titiler 2.4's tiles of it are 250 pixels a side: not compared);

- tiles: every tile of zooms 8-12 over the footprint, in one shuffled order; each case first
  passes over them all with the Python client (every answer checked: a 200 PNG), TiTiler's
  404s (tiles missing the raster) left out, and the two servers' pixels compared (printed:
  where each is opaque, the RGB values where both are; terrain-RGB as the heights decoded);
- throughput (``wrk``, one thread, the same connections for both servers): passes over each
  case's tiles, TiTiler then mapsvc with ``nocache=1`` (rendered, nothing stored), case after
  case; then one process rendering each case's tiles in a bare loop
  (``TileRenderer.render_tile`` on the configured style, as a render process does), a
  reference; ``--profile``: that loop under cProfile, its top functions printed.

Goal: each case >= 3x TiTiler's rate, the median of the per-pass ratios (the two servers of a
pass ran back to back). About 6 minutes on 2 CPUs once TiTiler is installed.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import morecantile
import numpy as np
import rasterio
import rasterio.shutil
from rasterio.enums import ColorInterp
from rasterio.transform import from_bounds
from rasterio.warp import transform, transform_bounds

from shared.raster.paths import encode_id
from tests.bench._harness import (
    Deadline,
    WrkCase,
    admin_key,
    auth_headers,
    auth_lines,
    goal,
    load_average,
)
from tests.bench.bench_tiles import (
    Pass,
    checked_pass,
    header,
    measure_wrk,
    row,
    run_pass,
    scene_tiles,
    start_mapsvc,
    start_titiler,
    target_of,
    tile_of,
    titiler_templates,
    titiler_venv,
    url_of,
    wait_job,
)
from tests.layers import decode

DEM_REL = "bench/dem-f32.tif"
SCENE_REL = "bench/scene-u16.tif"
DEM_NODATA = -9999.0
#: the centre of both rasters (lon, lat): the Alps
CENTRE = (10.2, 46.4)
#: Web Mercator metres per pixel at zoom 12 (the rasters' pixels)
RES_Z12 = 2 * np.pi * 6378137.0 / 256 / 2**12
#: the terrain and the scene (the same every run)
SEED = 87
SHUFFLE_SEED = 13
CASE_NAMES = ("dem-colormap", "ndvi", "u16-stretch", "hillshade", "terrainrgb")


# --- the rasters ------------------------------------------------------------------------------


def _field(size: int, rng: np.random.Generator, waves: int, top_cycles: float) -> np.ndarray:
    """A smooth field of about -1..1 over ``size``² pixels: ``waves`` plane waves of random
    directions, up to ``top_cycles`` cycles across, their amplitudes falling as 1/frequency."""
    axis = np.linspace(0.0, 1.0, size, dtype=np.float32)
    out = np.zeros((size, size), np.float32)
    norm = 0.0
    for _ in range(waves):
        cycles = float(np.exp(rng.uniform(0, np.log(top_cycles))))
        angle = rng.uniform(0, 2 * np.pi)
        fx, fy = (
            np.float32(cycles * np.cos(angle) * 2 * np.pi),
            np.float32(cycles * np.sin(angle) * 2 * np.pi),
        )
        phase = np.float32(rng.uniform(0, 2 * np.pi))
        amplitude = np.float32(1.0 / cycles)
        # sin(a + b) = sin a cos b + cos a sin b: two outer products, no size² trigonometry
        ax, ay = fx * axis + phase, fy * axis
        out += amplitude * (
            np.outer(np.cos(ay), np.sin(ax)) + np.outer(np.sin(ay), np.cos(ax))
        ).astype(np.float32)
        norm += float(amplitude)
    return out / np.float32(norm)


def _write_cog(target: Path, data: np.ndarray, profile: dict[str, Any], interp: list[Any]) -> str:
    """``data`` (bands, rows, columns) written as a deflated COG (with overviews) at ``target``;
    a line describing it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    plain = target.with_suffix(".plain.tif")
    with rasterio.open(
        plain, "w", driver="GTiff", tiled=True, blockxsize=512, blockysize=512, **profile
    ) as dst:
        dst.write(data)
        if interp:
            dst.colorinterp = interp
    with rasterio.open(plain) as src:
        # the predictor COGs of DEMs and imagery are made with (floating point, else integer)
        predictor = 3 if profile["dtype"].startswith("float") else 2
        rasterio.shutil.copy(src, target, driver="COG", compress="deflate", predictor=predictor)
    plain.unlink()
    with rasterio.open(target) as cog:
        return (
            f"{target.name}: COG {cog.width}x{cog.height}, {cog.count} x {cog.dtypes[0]},"
            f" {cog.crs.to_string()}, nodata {cog.nodata:g}, blocks {cog.block_shapes[0]},"
            f" overviews {cog.overviews(1)}, {target.stat().st_size} bytes"
        )


def make_rasters(raster_dir: Path, size: int) -> list[str]:
    """The DEM and the scene (see the module's text) under ``raster_dir``; a line on each."""
    rng = np.random.default_rng(SEED)
    cx, cy = transform("EPSG:4326", "EPSG:3857", [CENTRE[0]], [CENTRE[1]])
    half = size * RES_Z12 / 2
    # not on the tile grid: a third of a pixel off
    merc = (cx[0] - half + RES_Z12 / 3, cy[0] - half, cx[0] + half + RES_Z12 / 3, cy[0] + half)

    # the DEM: 200..3600 m of ridges and valleys, a lake and a corner of nodata
    relief = _field(size, rng, 24, 40.0)
    dem = 1900 + 1700 * relief / max(float(np.abs(relief).max()), 1e-6)
    rows, cols = np.ogrid[:size, :size]
    lake = (rows - 0.6 * size) ** 2 + (cols - 0.3 * size) ** 2 < (0.05 * size) ** 2
    dem[lake] = DEM_NODATA
    dem[: size // 16, : size // 16] = DEM_NODATA
    geo = transform_bounds("EPSG:3857", "EPSG:4326", *merc)
    dem_profile = {
        "width": size,
        "height": size,
        "count": 1,
        "dtype": "float32",
        "crs": "EPSG:4326",
        "transform": from_bounds(*geo, size, size),
        "nodata": DEM_NODATA,
    }
    about = [_write_cog(raster_dir / DEM_REL, dem[np.newaxis], dem_profile, [])]
    del dem, lake

    # the scene: vegetation (0..1) drives red down and near infrared up; a little noise
    vegetation = np.clip(0.5 + 0.8 * _field(size, rng, 16, 30.0), 0, 1)
    noise = rng.integers(-60, 60, (4, size, size), dtype=np.int16)
    bands = [
        600 + 400 * (1 - vegetation),  # blue
        800 + 700 * vegetation,  # green
        500 + 2500 * (1 - vegetation),  # red
        1200 + 4000 * vegetation,  # near infrared
    ]
    scene = np.stack([np.clip(b + n, 1, 65535) for b, n in zip(bands, noise, strict=True)])
    scene = scene.astype(np.uint16)
    scene[:, -size // 16 :, -size // 16 :] = 0
    scene_profile = {
        "width": size,
        "height": size,
        "count": 4,
        "dtype": "uint16",
        "crs": "EPSG:3857",
        "transform": from_bounds(*merc, size, size),
        "nodata": 0,
    }
    interp = [ColorInterp.blue, ColorInterp.green, ColorInterp.red, ColorInterp.undefined]
    about.append(_write_cog(raster_dir / SCENE_REL, scene, scene_profile, interp))
    return about


# --- the cases --------------------------------------------------------------------------------


@dataclass
class Case:
    """One drawing asked of both servers: the query of each, the tiles they are asked for."""

    name: str
    raster: str  # DEM_REL or SCENE_REL
    ours: list[tuple[str, str]]
    peer: list[tuple[str, str]]
    tiles: list[morecantile.Tile] = field(default_factory=list)
    peer_case: WrkCase = field(default_factory=lambda: WrkCase("TiTiler"))
    ours_case: WrkCase = field(default_factory=lambda: WrkCase("mapsvc nocache=1"))
    loop_s: float | None = None
    pixels: str = ""

    def ratios(self) -> list[float]:
        return [
            o.rate / p.rate
            for o, p in zip(self.ours_case.passes, self.peer_case.passes, strict=True)
        ]


def query_text(pairs: Sequence[tuple[str, str]]) -> str:
    """``pairs`` as a query string (``+`` of an expression as ``%2B``, commas kept)."""
    return urlencode(list(pairs), quote_via=quote, safe=",")


def make_cases(configs: dict[str, dict[str, Any]]) -> list[Case]:
    """The cases (see the module's text), from what the configuration of each raster said."""
    dem_stats = configs[DEM_REL]["statistics"][0]
    lo, hi = dem_stats["min"], dem_stats["max"]
    dem_range = f"{lo:g},{hi:g}"
    scene_rendering = configs[SCENE_REL]["rendering"]
    if scene_rendering is None or scene_rendering.get("bidx") != ["3", "2", "1"]:
        raise RuntimeError(f"the scene's default rendering is not bands 3,2,1: {scene_rendering}")
    stretch = [("rescale", r) for r in scene_rendering["rescale"]]
    ndvi = [
        ("expression", "(b4-b3)/(b4+b3)"),
        ("rescale", "-1,1"),
        ("colormap_name", "rdylgn"),
    ]
    colormap = [("rescale", dem_range), ("colormap_name", "terrain")]
    cases = [
        Case("dem-colormap", DEM_REL, colormap, colormap),
        Case("ndvi", SCENE_REL, ndvi, ndvi),
        Case("u16-stretch", SCENE_REL, [], [("bidx", b) for b in ("3", "2", "1")] + stretch),
        Case("hillshade", DEM_REL, [("algorithm", "hillshade")], [("algorithm", "hillshade")]),
        Case("terrainrgb", DEM_REL, [("algorithm", "terrainrgb")], [("algorithm", "terrainrgb")]),
    ]
    return cases


def configure(client: httpx.Client, api: str, rel: str, deadline: Deadline) -> dict[str, Any]:
    """``rel`` configured as a layer (the worker's job), drawn with ``nearest`` as TiTiler
    draws: the job's result."""
    params = {"nocache": 1, "resampling": "nearest"}
    response = client.get(f"{api}/gis-raster/{rel}", params=params, timeout=120)
    if response.status_code == 202:
        return dict(wait_job(client, api, response.json()["id"], deadline, 600)["result"])
    if response.status_code != 200:
        raise RuntimeError(f"configuring {rel}: {response.status_code} {response.text}")
    return dict(response.json())


# --- pixels -----------------------------------------------------------------------------------


def rgba_of(png: bytes) -> np.ndarray:
    """The RGBA pixels (4, rows, columns) of a PNG of gray, gray+alpha, RGB or RGBA."""
    pixels = decode(png)
    if pixels.shape[0] == 1:
        return np.concatenate([pixels] * 3 + [np.full_like(pixels, 255)])
    if pixels.shape[0] == 2:
        return np.concatenate([pixels[:1]] * 3 + [pixels[1:]])
    if pixels.shape[0] == 3:
        return np.concatenate([pixels, np.full_like(pixels[:1], 255)])
    return pixels


def terrain_rgb_heights(rgba: np.ndarray) -> np.ndarray:
    """The heights (metres) a terrain-RGB tile encodes (Mapbox's default base and interval)."""
    r, g, b = (rgba[i].astype(np.float64) for i in range(3))
    return -10000 + (r * 65536 + g * 256 + b) * 0.1


def compare(mine: Pass, theirs: Pass, heights: bool = False) -> str:
    """How the two servers' tiles differ, over the tiles both drew: where each is opaque, and
    the RGB values (``heights``: the terrain-RGB heights) where both are."""
    ours = {tile_of(u): b for u, b in mine.bodies.items()}
    peer = {tile_of(u): b for u, b in theirs.bodies.items()}
    both = sorted(set(ours) & set(peer))
    alpha_same = alpha_all = 0
    diffs: list[np.ndarray] = []
    shapes: Counter[str] = Counter()
    for tile in both:
        a, b = rgba_of(ours[tile]), rgba_of(peer[tile])
        if a.shape != b.shape:
            shapes[f"{b.shape[2]}x{b.shape[1]} against our {a.shape[2]}x{a.shape[1]}"] += 1
            continue
        opaque_a, opaque_b = a[3] > 0, b[3] > 0
        alpha_same += int((opaque_a == opaque_b).sum())
        alpha_all += opaque_a.size
        shared = opaque_a & opaque_b
        if heights:
            diffs.append(np.abs(terrain_rgb_heights(a) - terrain_rgb_heights(b))[shared])
        else:
            diffs.append(np.abs(a[:3].astype(np.int16) - b[:3])[:, shared].ravel())
    if shapes:
        return f"TiTiler's tiles are of another size: {dict(shapes)}; pixels not compared"
    if not both:
        return "no tile drawn by both"
    d = np.concatenate(diffs) if diffs else np.zeros(0)
    if d.size == 0:
        return f"{len(both)} tiles: no pixel drawn by both"
    what = "heights |difference| (m)" if heights else "RGB |difference|"
    return (
        f"{len(both)} tiles: opaque alike at {100 * alpha_same / alpha_all:.2f}% of pixels;"
        f" {what} where both drew: mean {d.mean():.2f}, 99th percentile"
        f" {np.percentile(d, 99):.2g}, max {d.max():.2g}"
    )


# --- the bare loop ----------------------------------------------------------------------------


def render_loop(
    mapnik_dir: Path,
    layer: str,
    case: Case,
    band_count: int,
    deadline: Deadline,
    profile: bool,
) -> tuple[float, str]:
    """Seconds one process takes to render the case's tiles (``render_tile``, PNG as the
    service encodes it), after a few untimed; with ``profile``, cProfile's top functions."""
    from shared.base.grid import TileAddress
    from shared.memory import keep_image_memory
    from shared.raster.rendering import parse_rendering
    from shared.tiles.render import TileRenderer

    keep_image_memory()  # as a render process does
    query: dict[str, list[str]] = {}
    for name, value in case.ours:
        query.setdefault(name, []).append(value)
    rendering = parse_rendering(query, band_count)
    addresses = [TileAddress(t.z, t.x, t.y) for t in case.tiles]
    with TileRenderer(mapnik_dir) as renderer:
        for tile in addresses[:8]:
            renderer.render_tile(layer, "en", tile, rendering=rendering)
        profiler = cProfile.Profile() if profile else None
        t0 = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        for tile in addresses:
            renderer.render_tile(layer, "en", tile, rendering=rendering)
            deadline.left()
        if profiler is not None:
            profiler.disable()
        seconds = time.perf_counter() - t0
    text = ""
    if profiler is not None:
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out).strip_dirs()
        stats.sort_stats("tottime").print_stats(14)
        text = out.getvalue()
    return seconds, text


# --- the run ----------------------------------------------------------------------------------


def main() -> int:  # noqa: C901 - one run, step by step
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="N: server and worker processes")
    parser.add_argument(
        "--api-workers", type=int, default=1, help="mapsvc API processes (MAPSVC_API_WORKERS)"
    )
    parser.add_argument("--concurrency", type=int, default=8, help="client connections")
    parser.add_argument("--passes", type=int, default=3, help="wrk passes per case")
    parser.add_argument("--seconds", type=int, default=8, help="seconds of one wrk pass")
    parser.add_argument("--size", type=int, default=4096, help="pixels a side of each raster")
    parser.add_argument("--minzoom", type=int, default=8)
    parser.add_argument("--maxzoom", type=int, default=12, help="the last zoom (included)")
    parser.add_argument(
        "--cases", default=",".join(CASE_NAMES), help=f"of {','.join(CASE_NAMES)} (all)"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the bare loops")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/9", help="flushed first")
    parser.add_argument(
        "--titiler-venv",
        type=Path,
        default=Path(tempfile.gettempdir()) / "mapsvc-bench" / "titiler-venv",
        help="made and installed when missing, reused otherwise",
    )
    parser.add_argument("--timeout-s", type=float, default=1200, help="bound of the whole run")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work dir")
    args = parser.parse_args()
    chosen = args.cases.split(",")
    if unknown := set(chosen) - set(CASE_NAMES):
        parser.error(f"unknown cases: {', '.join(sorted(unknown))}")
    deadline = Deadline(args.timeout_s)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    n = args.workers
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # progress as it goes

    work = Path(tempfile.mkdtemp(prefix="mapsvc-bench-render-"))
    logs = work / "logs"
    logs.mkdir()
    key = admin_key()  # mapsvc's; TiTiler ignores the header
    with ExitStack() as stack, httpx.Client(headers=auth_headers(key)) as client:
        if args.keep:
            print(f"work dir (kept): {work}")
        else:
            stack.callback(shutil.rmtree, work, ignore_errors=True)
        t0 = time.perf_counter()
        raster_dir = work / "map" / "raster"
        for line in make_rasters(raster_dir, args.size):
            print(f"raster {line}")
        print(f"  (written in {time.perf_counter() - t0:.1f} s)")
        tiles = scene_tiles(raster_dir / SCENE_REL, args.minzoom, args.maxzoom)
        random.Random(SHUFFLE_SEED).shuffle(tiles)

        venv, versions = titiler_venv(args.titiler_venv, deadline)
        titiler, titiler_base = start_titiler(stack, venv, n, logs, client, deadline)
        peer_png = {
            rel: titiler_templates(client, titiler_base, raster_dir / rel)["png"]
            for rel in (DEM_REL, SCENE_REL)
        }
        print(f"TiTiler: {versions}; uvicorn --workers {n}; {peer_png[DEM_REL]}")
        servers, api = start_mapsvc(
            stack, work, n, args.redis, args.api_workers, logs, client, deadline, key
        )
        origin = api.removesuffix("/api-user")
        configs = {}
        for rel in (DEM_REL, SCENE_REL):
            t0 = time.perf_counter()
            configs[rel] = configure(client, api, rel, deadline)
            if configs[rel]["layer"] != encode_id(rel):
                raise RuntimeError(f"layer {configs[rel]['layer']!r} is not the id of {rel}")
            stats = configs[rel]["statistics"]
            spans = ", ".join(
                f"b{s['band']} {s['percentile_2']:g}..{s['percentile_98']:g}" for s in stats
            )
            print(
                f"mapsvc configured {rel} in {time.perf_counter() - t0:.1f} s: 2-98 % {spans};"
                f" rendering {configs[rel]['rendering']}"
            )
        print(
            f"mapsvc: API (MAPSVC_API_WORKERS={args.api_workers}, MAPSVC_RENDER_PROCESSES={n}"
            f" each) + worker -c {n}; {origin}{configs[DEM_REL]['url']}"
        )
        cases = [c for c in make_cases(configs) if c.name in chosen]
        auth = auth_lines(key)

        def ours(case: Case, subset: Sequence[morecantile.Tile]) -> list[str]:
            template = f"{origin}{configs[case.raster]['url']}"
            query = query_text([("nocache", "1"), *case.ours])
            return [f"{url_of(template, t)}?{query}" for t in subset]

        def peer(case: Case, subset: Sequence[morecantile.Tile]) -> list[str]:
            query = query_text(case.peer)
            return [f"{url_of(peer_png[case.raster], t)}&{query}" for t in subset]

        per_zoom = ", ".join(f"z{z}: {c}" for z, c in sorted(Counter(t.z for t in tiles).items()))
        print(
            f"tiles: {len(tiles)} of zooms {args.minzoom}-{args.maxzoom} ({per_zoom}), shuffled;"
            f" {args.concurrency} client connections; {args.passes} passes of {args.seconds} s"
            f" per case and server; N = {n}; {os.cpu_count()} CPUs"
        )
        print(f"load average (1, 5, 15 min) before measuring: {load_average()}")
        if os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1):
            print("WARNING: the machine is busy with other work: every figure will be skewed")

        print("content (Python client, every answer checked; TiTiler's 404s left out) ...")
        for case in cases:
            warm = tiles[:: max(1, len(tiles) // 32)]
            run_pass(peer(case, warm), args.concurrency, deadline)
            run_pass(ours(case, warm), args.concurrency, deadline, auth)
            probe = run_pass(peer(case, tiles), args.concurrency, deadline)
            if set(probe.answers) - {"200 image/png", "404 application/json"}:
                raise RuntimeError(f"TiTiler {case.name}: unexpected answers: {probe.summary()}")
            served = {tile_of(u) for u in probe.bodies}
            case.tiles = [t for t in tiles if (t.z, t.x, t.y) in served]
            mine = checked_pass(
                f"mapsvc {case.name}", ours(case, case.tiles), args.concurrency, deadline, auth
            )
            case.pixels = compare(mine, probe, heights=case.name == "terrainrgb")
            print(
                f"  TiTiler {case.name}: {probe.summary()} ({probe.rate:.1f} tiles/s);"
                f" {len(case.tiles)} tiles kept\n  pixels: {case.pixels}"
            )

        print(
            f"throughput: wrk -t1 -c{args.concurrency} -d{args.seconds}s, TiTiler then mapsvc"
            " nocache=1, case after case ..."
        )
        headers = auth_headers(key)
        for i in range(args.passes):
            label = f"pass {i + 1}/{args.passes}"
            for case in cases:
                common = (args.seconds, args.concurrency, 1, f"{label} {case.name}")
                peer_paths = [target_of(u) for u in peer(case, case.tiles)]
                our_paths = [target_of(u) for u in ours(case, case.tiles)]
                measure_wrk(case.peer_case, titiler_base, peer_paths, {}, *common)
                measure_wrk(case.ours_case, origin, our_paths, headers, *common)
        titiler.stop()  # its processes leave the CPUs to the loops
        for server in servers:
            server.check()

        print("the bare loop: one process, render_tile on the configured style ...")
        mapnik_dir = work / "map" / "mapnik"
        for case in cases:
            with rasterio.open(raster_dir / case.raster) as ds:
                count = ds.count
            case.loop_s, profiled = render_loop(
                mapnik_dir, encode_id(case.raster), case, count, deadline, args.profile
            )
            print(f"  {case.name}: {len(case.tiles) / case.loop_s:.1f} tiles/s")
            if profiled:
                print(profiled)

        print(f"\n{header()}")
        for case in cases:
            ratios = case.ratios()
            ratio = statistics.median(ratios)
            print(row(f"{case.name}: TiTiler", case.peer_case.rate, *case.peer_case.latency()))
            print(
                row(
                    f"{case.name}: mapsvc nocache=1",
                    case.ours_case.rate,
                    *case.ours_case.latency(),
                    f"{ratio:.2f}x TiTiler",
                    ">= 3x",
                    "met" if ratio >= 3 else "NOT met",
                )
            )
            if case.loop_s:
                loop_rate = len(case.tiles) / case.loop_s
                print(
                    row(
                        f"{case.name}: bare loop (1 process)",
                        loop_rate,
                        None,
                        None,
                        f"{case.ours_case.rate / loop_rate:.2f}x loop (server)",
                    )
                )
            print(f"  per pass: {', '.join(f'{r:.2f}x' for r in ratios)}")
        print("\ngoals (medians of the per-pass ratios):")
        for case in cases:
            ratio = statistics.median(case.ratios())
            goal(f"numpy rasters, {case.name}: mapsvc / TiTiler", ratio, 3, "x")
        print(f"load average (1, 5, 15 min) at the end: {load_average()}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
