"""Benchmark: raster tiles against TiTiler: uncached rendering, bytes per format, pre-tiling.

Run from the checkout with ``make bench`` (or ``.venv/bin/python -m tests.bench.bench_tiles``);
Redis and PostgreSQL must be running (``bash deploy/services.sh``). In one run, on this machine:

- a Cloud-Optimized GeoTIFF of the shared Landsat scene (``single/RGB.byte.tif``) is written to
  ``<tmp work dir>/map/raster/bench/landsat.tif``; both servers serve that one file;
- TiTiler (``titiler.application``, installed into a virtualenv of its own, reused between runs)
  runs under ``uvicorn --workers N``; mapsvc runs its API (``mapsvc serve``: one process by
  default, ``--api-workers``; N render processes each) and a worker (``mapsvc worker -c N``) on a
  Redis db of their own (db 8, flushed first), with a random admin key (``MAPSVC_ADMIN_API_KEY``)
  that every request to it carries, and quotas it does not reach;
- the tiles are every tile of zooms 8-12 over the scene's footprint, in one shuffled order (so
  that any stretch of the list is a fair sample of every zoom);
- content (Python client, every answer decoded enough to check it): each format (``.png``,
  ``.webp``, ``.jpg``, and ``@2x`` on every fourth tile: TiTiler's ``tilesize=512``) from both
  servers, uncached; the bytes per tile of each; lossless WebP from a second mapsvc API started
  with ``MAPSVC_WEBP_LOSSLESS=true``; the layer's cache filled through the API (every answer a
  ``MISS``), then read back (every answer a ``HIT``, the same bytes);
- throughput (``wrk``, one thread, the same connections for both servers, so that the client is
  not the limit): passes over the tiles interleaved between TiTiler and mapsvc with
  ``nocache=1`` (rendered, nothing stored), each round followed by one process rendering the
  same tiles with the service's own renderer in a bare loop (``TileRenderer``, one process);
  then cached tiles;
- pre-tiling: the same job (``nocache=1``) with a worker of one process and a worker of N
  processes (the worker is restarted between them; runs alternate).

Goals (issue 13): uncached tiles >= 3x TiTiler's rate and >= 0.9 x N x the bare loop's;
pre-tiling with N worker processes >= 0.9 x N x the same job with one; lossless WebP at least
25% smaller than our PNG. Each ratio is the median of its per-pass ratios (printed too): the
cases of one pass run back to back, so a pass that other work on the machine slowed down skews
its own ratio only. Also printed: cached tiles against TiTiler's uncached rate, and pre-tiling
against the loop.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
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
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import morecantile
import rasterio
import rasterio.shutil
from rasterio.warp import transform_bounds

from shared.demo import DEMO_DATA
from shared.raster.paths import encode_id
from shared.redis_clients import sync_client
from tests.bench._harness import (
    Deadline,
    HttpConnection,
    Server,
    WrkCase,
    admin_key,
    auth_headers,
    auth_lines,
    check_flushable,
    free_port,
    goal,
    load_average,
    service_env,
    start,
    wait_http,
    wrk_rate,
)

ROOT = Path(__file__).resolve().parents[2]
SCENE = DEMO_DATA / "raster" / "single" / "RGB.byte.tif"
SCENE_REL = "bench/landsat.tif"
TITILER_REQUIREMENTS = ("titiler.application>=0.18,<3", "uvicorn[standard]>=0.30,<1")
LANG_TOKEN = "{{lang}}"  # ``shared.tiles.styles.LANG_TOKEN``
TMS = morecantile.tms.get("WebMercatorQuad")
#: the first bytes of each format's files, by URL extension
MAGIC: dict[str, Callable[[bytes], bool]] = {
    "png": lambda b: b.startswith(b"\x89PNG\r\n\x1a\n"),
    "webp": lambda b: b[:4] == b"RIFF" and b[8:12] == b"WEBP",
    "jpg": lambda b: b.startswith(b"\xff\xd8\xff"),
}
#: the content types of each format (TiTiler's JPEG is ``image/jpg``)
MEDIA = {"png": ("image/png",), "webp": ("image/webp",), "jpg": ("image/jpeg", "image/jpg")}
FORMATS = ("png", "webp", "jpg")
#: the order of the tiles (the same in every run)
SHUFFLE_SEED = 13


def make_cog(work: Path) -> tuple[Path, str]:
    """The COG both servers serve, and a line describing it."""
    target = work / "map" / "raster" / SCENE_REL
    target.parent.mkdir(parents=True, exist_ok=True)
    with rasterio.open(SCENE) as src:
        rasterio.shutil.copy(src, target, driver="COG", compress="deflate")
    with rasterio.open(target) as cog:
        about = (
            f"{SCENE.name} as COG ({cog.width}x{cog.height}, {cog.count} x {cog.dtypes[0]},"
            f" {cog.crs.to_string()}, blocks {cog.block_shapes[0][0]}, overviews"
            f" {cog.overviews(1)}, {target.stat().st_size} bytes)"
        )
    return target, about


def scene_tiles(cog: Path, minzoom: int, maxzoom: int) -> list[morecantile.Tile]:
    with rasterio.open(cog) as src:
        west, south, east, north = transform_bounds(
            src.crs, "EPSG:4326", *src.bounds, densify_pts=21
        )
    return list(TMS.tiles(west, south, east, north, zooms=list(range(minzoom, maxzoom + 1))))


def url_of(template: str, tile: morecantile.Tile) -> str:
    return (
        template.replace("{z}", str(tile.z)).replace("{x}", str(tile.x)).replace("{y}", str(tile.y))
    )


def target_of(url: str) -> str:
    """The path and query of ``url`` (what ``wrk`` and the bare client send)."""
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path


# --- the content client -----------------------------------------------------------------------


@dataclass
class Pass:
    """One pass of the Python client: wall time, what came back, the bytes of each answer."""

    seconds: float
    answers: Counter[str] = field(default_factory=Counter)
    cache: Counter[str] = field(default_factory=Counter)
    #: the body of each 200 answer, by URL
    bodies: dict[str, bytes] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return sum(self.answers.values()) / self.seconds

    def suspect(self) -> list[str]:
        """Answers other than a 200 of the format asked for."""
        return sorted(k for k in self.answers if not k.startswith("200 ") or "(not " in k)

    def summary(self) -> str:
        return ", ".join(f"{n} x {k}" for k, n in self.answers.most_common())


async def _run_pass(urls: Sequence[str], concurrency: int, timeout_s: float, auth: str) -> Pass:
    out = Pass(0.0)
    first = urlsplit(urls[0])
    host, port = first.hostname or "127.0.0.1", first.port or 80
    pending: Iterator[str] = iter(urls)

    async def fetch() -> None:
        connection = HttpConnection(host, port, auth)
        try:
            for url in pending:
                ext = urlsplit(url).path.rpartition(".")[2]
                try:
                    status, headers, body = await asyncio.wait_for(
                        connection.get(target_of(url)), timeout_s
                    )
                except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
                    out.answers[f"error {type(exc).__name__}"] += 1
                    connection.close()
                    continue
                kind = headers.get("content-type", "-").split(";")[0]
                if status == 200:
                    if kind not in MEDIA.get(ext, ()) or not (ext in MAGIC and MAGIC[ext](body)):
                        kind += f" (not a .{ext})"
                    out.bodies[url] = body
                out.answers[f"{status} {kind}"] += 1
                out.cache[headers.get("x-cache", "-")] += 1
        finally:
            connection.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(fetch() for _ in range(concurrency)))
    out.seconds = time.perf_counter() - t0
    return out


def run_pass(urls: Sequence[str], concurrency: int, deadline: Deadline, auth: str = "") -> Pass:
    """One pass over ``urls`` with ``concurrency`` connections.

    ``auth``: header lines added to every request (``auth_lines(key)`` for mapsvc).
    """

    async def bounded() -> Pass:
        return await asyncio.wait_for(
            _run_pass(urls, concurrency, deadline.left(120), auth), deadline.left()
        )

    return asyncio.run(bounded())


def checked_pass(
    name: str, urls: Sequence[str], concurrency: int, deadline: Deadline, auth: str = ""
) -> Pass:
    """A pass whose every answer must be a 200 of the format asked for."""
    result = run_pass(urls, concurrency, deadline, auth)
    print(f"  {name}: {result.summary()} ({result.rate:.1f} tiles/s)", flush=True)
    if result.suspect():
        raise RuntimeError(f"{name}: unexpected answers: {', '.join(result.suspect())}")
    return result


# --- TiTiler ----------------------------------------------------------------------------------


def titiler_venv(venv: Path, deadline: Deadline) -> tuple[Path, str]:
    """The virtualenv with TiTiler (made and installed when missing), and its version."""
    python = venv / "bin" / "python"
    probe = [
        str(python),
        "-c",
        "from importlib.metadata import version as v;"
        "print('titiler.application', v('titiler.application'), 'rio-tiler', v('rio-tiler'),"
        " 'rasterio', v('rasterio'), 'uvicorn', v('uvicorn'), 'uvloop', v('uvloop'))",
    ]
    found = subprocess.run(probe, capture_output=True, text=True) if python.exists() else None
    if found is None or found.returncode != 0:
        print(f"installing TiTiler into {venv} ...", flush=True)
        if not python.exists():
            subprocess.run(
                [sys.executable, "-m", "venv", str(venv)], check=True, timeout=deadline.left(120)
            )
        pip = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *TITILER_REQUIREMENTS],
            capture_output=True,
            text=True,
            timeout=deadline.left(900),
        )
        if pip.returncode != 0:
            raise RuntimeError(
                f"pip install {' '.join(TITILER_REQUIREMENTS)} failed:\n{pip.stderr}"
            )
        found = subprocess.run(probe, capture_output=True, text=True, check=True)
    return venv, found.stdout.strip()


def titiler_templates(client: httpx.Client, base: str, cog: Path) -> dict[str, str]:
    """TiTiler's tile URL template of each variant (``png``, ``webp@2x``, …).

    Its routes changed between versions: ``@2x`` is the ``@{scale}x`` route where there is one,
    else ``tilesize=512``.
    """
    paths: dict[str, Any] = {}
    for doc in ("/api", "/openapi.json"):
        response = client.get(base + doc, timeout=30)
        if response.status_code == 200 and "paths" in response.json():
            paths = response.json()["paths"]
            break
    routes = [p for p in paths if p.startswith("/cog/tiles/") and "{z}/{x}/{y}" in p]
    if not routes:
        raise RuntimeError(f"no /cog/tiles route in TiTiler's OpenAPI: {sorted(paths)[:20]}")

    def pick(scaled: bool) -> str | None:
        found = [p for p in routes if ("@" in p) == scaled]
        # with the tile matrix set in the path first, and with the format suffix first
        found.sort(key=lambda p: ("{z}" in p.split("/")[3], not p.endswith(".{format}")))
        if not found:
            return None
        parts = []
        for part in found[0].split("/"):
            if part.lower() in ("{tilematrixsetid}", "{tile_matrix_set_id}"):
                part = "WebMercatorQuad"
            parts.append(part)
        return "/".join(parts)

    query = f"url={quote(str(cog), safe='/')}"
    plain, scaled = pick(False), pick(True)
    assert plain is not None
    out = {}
    for fmt in FORMATS:
        for retina in (False, True):
            route, extra = plain, "&tilesize=512" if retina else ""
            if retina and scaled is not None:
                route, extra = scaled.replace("{scale}", "2"), ""
            if route.endswith(".{format}"):
                route = route[: -len(".{format}")] + f".{fmt}"
            else:
                extra += f"&format={fmt}"
            out[fmt + ("@2x" if retina else "")] = f"{base}{route}?{query}{extra}"
    return out


def start_titiler(
    stack: ExitStack, venv: Path, n: int, logs: Path, client: httpx.Client, deadline: Deadline
) -> tuple[Server, str]:
    """TiTiler under ``uvicorn --workers n``, once it answers; and its base URL."""
    port = free_port()
    argv = [str(venv / "bin" / "uvicorn"), "titiler.application.main:app"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--workers", str(n)]
    # its own rasterio finds its own PROJ and GDAL data; ours may be set for the mapnik wheel
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PROJ_", "GDAL_DATA"))}
    server = start(stack, "TiTiler", argv, logs / "titiler.log", env, ROOT)
    base = f"http://127.0.0.1:{port}"
    wait_http(client, f"{base}/healthz", [server], deadline, 120)
    return server, base


# --- mapsvc -----------------------------------------------------------------------------------


def wait_job(
    client: httpx.Client,
    api: str,
    job_id: str,
    deadline: Deadline,
    limit_s: float,
    every_s: float = 0.02,
) -> dict[str, Any]:
    """The descriptor of a job once it succeeded (polled every ``every_s``); raises when it
    failed or lingered."""
    end = time.monotonic() + deadline.left(limit_s)
    while True:
        job: dict[str, Any] = client.get(f"{api}/jobs/{job_id}", timeout=10).json()
        if job.get("state") == "succeeded":
            return job
        if job.get("state") in ("failed", "cancelled"):
            raise RuntimeError(f"job {job_id} {job['state']}: {job.get('error')}")
        if time.monotonic() > end:
            raise TimeoutError(f"job {job_id} still {job.get('state')} after {limit_s:.0f} s")
        time.sleep(every_s)


def configure_layer(
    client: httpx.Client, api: str, deadline: Deadline, resampling: str = "bilinear"
) -> dict[str, Any]:
    params = {"nocache": 1, "resampling": resampling}
    response = client.get(f"{api}/gis-raster/{SCENE_REL}", params=params, timeout=120)
    if response.status_code == 202:
        return dict(wait_job(client, api, response.json()["id"], deadline, 300)["result"])
    if response.status_code != 200:
        raise RuntimeError(f"configuring {SCENE_REL}: {response.status_code} {response.text}")
    return dict(response.json())


def mapsvc_env(
    work: Path, n: int, redis_url: str, api_workers: int, port: int, key: str
) -> dict[str, str]:
    """The environment of the API and the worker a run starts."""
    return {
        **os.environ,
        "MAPSVC_PORT": str(port),
        "MAPSVC_HOST": "127.0.0.1",
        "MAPSVC_WORK_DIR": str(work),
        "MAPSVC_REDIS_URL": redis_url,
        "MAPSVC_RENDER_PROCESSES": str(n),
        "MAPSVC_API_WORKERS": str(api_workers),
        "MAPSVC_LOG_LEVEL": "WARNING",
        **service_env(key),
    }


CLI = [sys.executable, "-m", "api.cli"]


def start_worker(
    stack: ExitStack, env: dict[str, str], processes: int, logs: Path, name: str = "worker"
) -> Server:
    """``mapsvc worker -c processes`` (ready once it answers a ping: see :func:`wait_worker`)."""
    argv = [*CLI, "worker", "-c", str(processes)]
    return start(stack, f"mapsvc {name}", argv, logs / f"{name}.log", env, ROOT)


def wait_worker(redis_url: str, worker: Server, processes: int, deadline: Deadline) -> None:
    """Wait until the worker's pool of ``processes`` answers the broker's ``stats``."""
    from celery import Celery

    app = Celery(broker=redis_url)
    end = time.monotonic() + deadline.left(60)
    try:
        while time.monotonic() < end:
            worker.check()
            stats = app.control.inspect(timeout=0.5).stats() or {}
            pools = [s.get("pool", {}) for s in stats.values()]
            if len(pools) == 1 and len(pools[0].get("processes", [])) == processes:
                return
            if len(pools) > 1:
                raise RuntimeError(f"more than one worker on {redis_url}: {sorted(stats)}")
        raise TimeoutError(
            f"the worker with {processes} processes did not answer:\n{worker.tail()}"
        )
    finally:
        app.close()


def start_mapsvc(
    stack: ExitStack,
    work: Path,
    n: int,
    redis_url: str,
    api_workers: int,
    logs: Path,
    client: httpx.Client,
    deadline: Deadline,
    key: str,
    changed: Callable[[dict[str, str]], dict[str, str]] | None = None,
) -> tuple[list[Server], str]:
    """The API and a worker with ``-c n`` on the work dir and a flushed Redis db, once ready.

    ``key`` is their admin key (``MAPSVC_ADMIN_API_KEY``): ``client`` must send it.
    ``changed``: their environment (:func:`mapsvc_env`'s) as another script wants it.
    """
    check_flushable(redis_url)
    redis = sync_client(redis_url)
    redis.flushdb()
    stack.callback(redis.close)
    stack.callback(redis.flushdb)  # after the servers stopped (callbacks run last in, first out)
    port = free_port()
    env = mapsvc_env(work, n, redis_url, api_workers, port, key)
    if changed is not None:
        env = changed(env)
    servers = [
        start(stack, "mapsvc API", [*CLI, "serve"], logs / "api.log", env, ROOT),
        start_worker(stack, env, n, logs),
    ]
    api = f"http://127.0.0.1:{port}/api-user"
    try:
        wait_http(client, f"{api}/ready", servers, deadline, 120)
    except TimeoutError as exc:
        raise RuntimeError(f"mapsvc is not ready (run `bash deploy/services.sh`?): {exc}") from exc
    return servers, api


def pretile(
    client: httpx.Client,
    api: str,
    layer: str,
    zooms: tuple[int, int],
    deadline: Deadline,
) -> tuple[float, dict[str, Any]]:
    """Seconds from the job's record (written as the request is answered) to its success, by
    the job's own ``created`` and ``finished``; and its result.

    The job is polled every 250 ms: a tighter poll would take CPU from the job it measures.
    ``zooms`` are the first and last zoom; the service's ``maxzoom`` is the end, excluded.
    """
    params = {"minzoom": zooms[0], "maxzoom": zooms[1] + 1, "nocache": 1, "async": 1}
    response = client.get(f"{api}/gis-layer-pretile/{layer}", params=params, timeout=60)
    if response.status_code != 202:
        raise RuntimeError(f"gis-layer-pretile: {response.status_code} {response.text[:500]}")
    job = wait_job(client, api, response.json()["id"], deadline, 900, every_s=0.25)
    created, finished = (datetime.fromisoformat(job[k]) for k in ("created", "finished"))
    return (finished - created).total_seconds(), dict(job["result"] or {})


def pretiled_count(result: dict[str, Any]) -> int | None:
    """Tiles a pre-tiling job rendered (its ``rendered``, or the sum over its ``zooms``)."""
    if isinstance(result.get("rendered"), int):
        return int(result["rendered"])
    zooms = result.get("zooms")
    if isinstance(zooms, list) and all(isinstance(z, dict) and "rendered" in z for z in zooms):
        return sum(int(z["rendered"]) for z in zooms)
    return None


def cached_tiles(cache_dir: Path) -> list[morecantile.Tile]:
    """The tiles stored under ``<layer>/<lang>/<z>/<x>/<y>.png``."""
    tiles = []
    for png in cache_dir.glob("*/*/*/*.png"):
        z, x, y = png.parent.parent.name, png.parent.name, png.stem
        tiles.append(morecantile.Tile(int(x), int(y), int(z)))
    return sorted(tiles, key=lambda t: (t.z, t.x, t.y))


def render_loop(
    mapnik_dir: Path, layer: str, tiles: Sequence[morecantile.Tile], deadline: Deadline
) -> float:
    """Seconds one process takes to draw ``tiles`` one by one with the service's own renderer
    (``TileRenderer``: the layer's drawing, PNG by the service's encoder), as a render process
    draws them, without the API and the pool around it.

    The layer is loaded and a few tiles drawn first, untimed (a render process has done both
    before its first request).
    """
    from shared.base.grid import TileAddress
    from shared.memory import keep_image_memory
    from shared.tiles.render import TileRenderer

    keep_image_memory()  # as a render process does (shared/memory.py)
    with TileRenderer(mapnik_dir) as renderer:

        def render(tile: morecantile.Tile) -> None:
            renderer.render_tile(layer, "en", TileAddress(tile.z, tile.x, tile.y))

        for tile in tiles[:16]:
            render(tile)
        t0 = time.perf_counter()
        for tile in tiles:
            render(tile)
            deadline.left()
        return time.perf_counter() - t0


# --- the report -------------------------------------------------------------------------------


def verdict(ratio: float, target: float) -> str:
    return "met" if ratio >= target else "NOT met"


def row(
    name: str,
    rate: float,
    p50: float | None = None,
    p99: float | None = None,
    ratio: str = "",
    target: str = "",
    result: str = "",
) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    return f"{name:44} {rate:9.1f} {ms(p50):>8} {ms(p99):>8}  {ratio:>20}  {target:>16}  {result}"


def header() -> str:
    return (
        f"{'case':44} {'tiles/s':>9} {'p50 ms':>8} {'p99 ms':>8}  {'ratio':>20}  {'goal':>16}"
        "  result"
    )


def measure_wrk(
    case: WrkCase,
    base: str,
    paths: Sequence[str],
    headers: dict[str, str],
    seconds: int,
    connections: int,
    threads: int,
    label: str,
) -> None:
    result = wrk_rate(
        base, paths, headers=headers, seconds=seconds, connections=connections, threads=threads
    )
    case.passes.append(result)
    print(
        f"  {label} {case.name}: {result.rate:.1f} tiles/s, p50 {result.p50_ms:.1f} ms,"
        f" p99 {result.p99_ms:.1f} ms",
        flush=True,
    )


@dataclass
class Pretiling:
    """Runs of the pre-tiling job (wall seconds, job result) by worker processes."""

    runs: dict[int, list[tuple[float, dict[str, Any]]]] = field(default_factory=dict)
    stored: list[morecantile.Tile] = field(default_factory=list)

    def rate(self, processes: int) -> float:
        """Median over the runs of tiles rendered per wall second."""
        return statistics.median(
            (pretiled_count(r) or len(self.stored)) / wall for wall, r in self.runs[processes]
        )


def measure_pretiling(
    stack: ExitStack,
    worker: Server,
    env: dict[str, str],
    logs: Path,
    client: httpx.Client,
    api: str,
    layer: str,
    zooms: tuple[int, int],
    cache_dir: Path,
    counts: Sequence[int],
    passes: int,
    deadline: Deadline,
) -> Pretiling:
    """Runs of the job with a worker of each process count in turn (the worker restarted).

    Each worker first runs the job over the first zoom, untimed (its processes load the map).
    """
    out = Pretiling()
    redis_url = env["MAPSVC_REDIS_URL"]
    for i in range(passes):
        for processes in counts:
            worker.stop()
            worker = start_worker(stack, env, processes, logs, f"worker-c{processes}")
            wait_worker(redis_url, worker, processes, deadline)
            pretile(client, api, layer, (zooms[0], zooms[0]), deadline)
            shutil.rmtree(cache_dir, ignore_errors=True)
            wall, result = pretile(client, api, layer, zooms, deadline)
            out.runs.setdefault(processes, []).append((wall, result))
            out.stored = cached_tiles(cache_dir)
            count = pretiled_count(result)
            print(
                f"  run {i + 1}/{passes} pre-tiling, worker -c {processes}: {count} tiles in"
                f" {wall:.2f} s, {(count or 0) / wall:.1f} tiles/s (the job's own"
                f" {result.get('seconds', '-')} s)",
                flush=True,
            )
    return out


@dataclass
class Sizes:
    """Mean bytes of a tile of each variant, ours and TiTiler's, over the same tiles."""

    rows: list[tuple[str, int, float, float | None]] = field(default_factory=list)

    def add(self, name: str, ours: Pass, peer: Pass | None) -> None:
        """Over the tiles both answered with a 200 (``ours`` alone when there is no peer)."""
        ours_by_tile = {tile_of(u): len(b) for u, b in ours.bodies.items()}
        peer_by_tile = {} if peer is None else {tile_of(u): len(b) for u, b in peer.bodies.items()}
        both = [t for t in ours_by_tile if peer is None or t in peer_by_tile]
        mean_ours = statistics.mean(ours_by_tile[t] for t in both)
        mean_peer = None if peer is None else statistics.mean(peer_by_tile[t] for t in both)
        self.rows.append((name, len(both), mean_ours, mean_peer))

    def mean(self, name: str) -> float:
        return next(r[2] for r in self.rows if r[0] == name)


def tile_of(url: str) -> tuple[int, int, int]:
    """``z, x, y`` of a tile URL of either server."""
    parts = urlsplit(url).path.rsplit("/", 3)[1:]
    y = parts[2].split(".")[0].split("@")[0]
    return int(parts[0]), int(parts[1]), int(y)


def print_sizes(sizes: Sizes) -> None:
    print(f"\n{'variant':44} {'tiles':>6} {'mapsvc B':>10} {'TiTiler B':>10} {'x TiTiler':>10}")
    for name, count, ours, peer in sizes.rows:
        peer_text = "-" if peer is None else f"{peer:.0f}"
        ratio = "-" if peer is None else f"{ours / peer:.2f}"
        print(f"{name:44} {count:6} {ours:10.0f} {peer_text:>10} {ratio:>10}")


# --- the run ----------------------------------------------------------------------------------


def start_lossless_api(
    stack: ExitStack, env: dict[str, str], logs: Path, client: httpx.Client, deadline: Deadline
) -> tuple[Server, str]:
    """A second API on the same work dir with ``MAPSVC_WEBP_LOSSLESS=true``, once ready."""
    port = free_port()
    env = {**env, "MAPSVC_PORT": str(port), "MAPSVC_WEBP_LOSSLESS": "true"}
    server = start(stack, "mapsvc API (lossless)", [*CLI, "serve"], logs / "api-ll.log", env, ROOT)
    origin = f"http://127.0.0.1:{port}"
    wait_http(client, f"{origin}/api-user/ready", [server], deadline, 120)
    return server, origin


def main() -> int:  # noqa: C901 - one run, step by step
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="N: server and worker processes")
    parser.add_argument(
        "--api-workers", type=int, default=1, help="mapsvc API processes (MAPSVC_API_WORKERS)"
    )
    parser.add_argument("--concurrency", type=int, default=8, help="client connections")
    parser.add_argument(
        "--resampling",
        choices=["nearest", "bilinear", "cubic"],
        default="nearest",
        help="of the layer: nearest, as TiTiler draws tiles unless told otherwise",
    )
    parser.add_argument("--passes", type=int, default=3, help="passes (runs) per case")
    parser.add_argument("--seconds", type=int, default=12, help="seconds of one wrk pass")
    parser.add_argument("--minzoom", type=int, default=8)
    parser.add_argument("--maxzoom", type=int, default=12, help="the last zoom (included)")
    parser.add_argument(
        "--retina-stride", type=int, default=4, help="@2x sizes over every n-th tile"
    )
    parser.add_argument(
        "--parts",
        default="sizes,throughput,pretile",
        help="what to measure, of sizes,throughput,pretile (all by default)",
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/8", help="flushed first")
    parser.add_argument(
        "--titiler-venv",
        type=Path,
        default=Path(tempfile.gettempdir()) / "mapsvc-bench" / "titiler-venv",
        help="made and installed when missing, reused otherwise",
    )
    parser.add_argument("--timeout-s", type=float, default=1800, help="bound of the whole run")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work dir")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    deadline = Deadline(args.timeout_s)
    # a SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so the servers are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    n = args.workers
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # progress as it goes

    work = Path(tempfile.mkdtemp(prefix="mapsvc-bench-tiles-"))
    logs = work / "logs"
    logs.mkdir()
    key = admin_key()  # mapsvc's; TiTiler ignores the header
    with ExitStack() as stack, httpx.Client(headers=auth_headers(key)) as client:
        if args.keep:
            print(f"work dir (kept): {work}")
        else:
            stack.callback(shutil.rmtree, work, ignore_errors=True)
        cog, about = make_cog(work)
        tiles = scene_tiles(cog, args.minzoom, args.maxzoom)
        random.Random(SHUFFLE_SEED).shuffle(tiles)
        venv, versions = titiler_venv(args.titiler_venv, deadline)
        titiler, titiler_base = start_titiler(stack, venv, n, logs, client, deadline)
        peer_templates = titiler_templates(client, titiler_base, cog)
        per_zoom = ", ".join(f"z{z}: {c}" for z, c in sorted(Counter(t.z for t in tiles).items()))
        print(f"scene: {about}")
        print(
            f"tiles: {len(tiles)} of zooms {args.minzoom}-{args.maxzoom} ({per_zoom}), shuffled;"
            f" {args.concurrency} client connections; {args.passes} passes per case; N = {n};"
            f" {os.cpu_count()} CPUs"
        )
        print(f"TiTiler: {versions}; uvicorn --workers {n}; {peer_templates['png']}")

        servers, api = start_mapsvc(
            stack, work, n, args.redis, args.api_workers, logs, client, deadline, key
        )
        env = mapsvc_env(work, n, args.redis, args.api_workers, urlsplit(api).port or 0, key)
        config = configure_layer(client, api, deadline, args.resampling)
        layer = str(config["layer"])
        if layer != encode_id(SCENE_REL):
            raise RuntimeError(f"layer {layer!r} is not the id of {SCENE_REL}")
        origin = api.removesuffix("/api-user")
        png_template = f"{origin}{config['url']}"
        if not png_template.endswith("{y}.png"):
            raise RuntimeError(f"unexpected tile URL template {png_template}")

        def ours(variant: str, nocache: bool = True, base: str = origin) -> list[str]:
            """Our tile URLs of ``variant`` (``png``, ``webp@2x``, …) on API ``base``."""
            fmt, _, retina = variant.partition("@")
            suffix = ("@" + retina if retina else "") + "." + fmt
            template = png_template.replace(origin, base).removesuffix(".png") + suffix
            urls = [url_of(template, t) for t in tiles]
            return [f"{u}?nocache=1" for u in urls] if nocache else urls

        def peer(variant: str) -> list[str]:
            return [url_of(peer_templates[variant], t) for t in tiles]

        cache_dir = work / "map" / "rtile" / layer
        auth = auth_lines(key)
        print(
            f"mapsvc: API (MAPSVC_API_WORKERS={args.api_workers}, MAPSVC_RENDER_PROCESSES={n}"
            f" each) + worker -c {n}; {png_template}"
        )
        print(f"load average (1, 5, 15 min) before measuring: {load_average()}")
        if os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1):
            print("WARNING: the machine is busy with other work: every figure will be skewed")

        # warm-up: every server process opens the file and loads its libraries, untimed
        warm = slice(None, None, max(1, len(tiles) // 64))
        run_pass(peer("png")[warm], args.concurrency, deadline)
        run_pass(ours("png")[warm], args.concurrency, deadline, auth)

        # TiTiler answers 404 for a tile of the footprint's corners that misses the raster
        # itself (mapsvc an empty tile): those are left out of every comparison
        probe = run_pass(peer("png"), args.concurrency, deadline)
        if set(probe.answers) - {"200 image/png", "404 application/json"}:
            raise RuntimeError(f"TiTiler png: unexpected answers: {probe.summary()}")
        served = {tile_of(u) for u in probe.bodies}
        left_out = [t for t in tiles if (t.z, t.x, t.y) not in served]
        tiles = [t for t in tiles if (t.z, t.x, t.y) in served]
        print(
            f"TiTiler png: {probe.summary()}; the {len(left_out)} tiles it has no data for are"
            f" left out: {len(tiles)} tiles"
        )

        sizes = Sizes()
        if "sizes" in parts:
            print("content and bytes per tile (Python client, every answer checked) ...")
            for variant in (*FORMATS, *(f"{f}@2x" for f in FORMATS)):
                stride = args.retina_stride if variant.endswith("@2x") else 1
                mine = checked_pass(
                    f"mapsvc {variant}", ours(variant)[::stride], args.concurrency, deadline, auth
                )
                if variant == "png":
                    theirs = probe
                else:
                    theirs = checked_pass(
                        f"TiTiler {variant}", peer(variant)[::stride], args.concurrency, deadline
                    )
                name = {"webp": "webp (lossy, quality 80)"}.get(variant, variant)
                sizes.add(name, mine, theirs)
                if variant == "webp":
                    lossless, ll_origin = start_lossless_api(stack, env, logs, client, deadline)
                    ll = checked_pass(
                        "mapsvc webp lossless",
                        ours("webp", base=ll_origin),
                        args.concurrency,
                        deadline,
                        auth,
                    )
                    lossless.stop()
                    sizes.add("webp lossless", ll, theirs)

        throughput: dict[str, WrkCase] = {}
        loops: list[float] = []
        if "throughput" in parts:
            print(
                f"throughput: wrk -t1 -c{args.concurrency} -d{args.seconds}s over the tiles"
                " (shuffled), TiTiler and mapsvc nocache=1 in turn, then the bare render loop"
                " (the service's renderer in one process) over the same tiles ..."
            )
            peer_case, ours_case = (
                WrkCase("TiTiler uncached"),
                WrkCase("mapsvc uncached (nocache=1)"),
            )
            peer_paths = [target_of(u) for u in peer("png")]
            our_paths = [target_of(u) for u in ours("png")]
            headers = auth_headers(key)
            for i in range(args.passes):
                label = f"pass {i + 1}/{args.passes}"
                common = (args.seconds, args.concurrency, 1, label)
                measure_wrk(peer_case, titiler_base, peer_paths, {}, *common)
                measure_wrk(ours_case, origin, our_paths, headers, *common)
                loops.append(render_loop(work / "map" / "mapnik", layer, tiles, deadline))
                print(f"  {label} bare render loop: {len(tiles) / loops[-1]:.1f} tiles/s")
            throughput = {"peer": peer_case, "ours": ours_case}
        titiler.stop()  # not needed any more: its processes leave the CPUs to the rest
        for server in servers:
            server.check()

        if "throughput" in parts:
            print("the cache, filled through the API then read back (Python client) ...")
            shutil.rmtree(cache_dir, ignore_errors=True)
            cold = checked_pass(
                "mapsvc cache cleared", ours("png", False), args.concurrency, deadline, auth
            )
            hot = checked_pass(
                "mapsvc cached", ours("png", False), args.concurrency, deadline, auth
            )
            if cold.cache != Counter(MISS=len(tiles)) or hot.cache != Counter(HIT=len(tiles)):
                raise RuntimeError(f"X-Cache: cold {dict(cold.cache)}, then {dict(hot.cache)}")
            if hot.bodies != cold.bodies:
                raise RuntimeError("a cached tile is not the tile rendered and stored")
            cached = WrkCase("mapsvc cached (HIT)")
            cached_paths = [target_of(u) for u in ours("png", False)]
            for i in range(args.passes):
                label = f"pass {i + 1}/{args.passes}"
                measure_wrk(
                    cached,
                    origin,
                    cached_paths,
                    auth_headers(key),
                    args.seconds,
                    args.concurrency,
                    2,
                    label,
                )
            throughput["cached"] = cached

        pretiling = None
        if "pretile" in parts:
            print(
                "pre-tiling (nocache=1, the cache folder cleared before each run): the same job"
                f" with a worker of 1 and of {n} processes, restarted in turn ..."
            )
            pretiling = measure_pretiling(
                stack,
                servers[1],
                env,
                logs,
                client,
                api,
                layer,
                (args.minzoom, args.maxzoom),
                cache_dir,
                (1, n),
                args.passes,
                deadline,
            )

        # each ratio is the median of its per-pass ratios (the cases of a pass ran back to back,
        # so that a pass the machine's other work slowed down skews its own ratio only)
        print(f"\n{header()}")
        loop_rate = len(tiles) / statistics.median(loops) if loops else None
        ratios: dict[str, list[float]] = {}
        if throughput:
            peer_case, ours_case = throughput["peer"], throughput["ours"]
            mine, theirs = ours_case.passes, peer_case.passes
            ratios["peer"] = [o.rate / p.rate for o, p in zip(mine, theirs, strict=True)]
            ratios["loop"] = [o.rate * s / len(tiles) for o, s in zip(mine, loops, strict=True)]
        if pretiling is not None:
            ratios["pretile"] = [
                (pretiled_count(b) or 0) / wb / ((pretiled_count(a) or 0) / wa)
                for (wa, a), (wb, b) in zip(pretiling.runs[1], pretiling.runs[n], strict=True)
            ]
        ratio = {k: statistics.median(v) for k, v in ratios.items()}
        if throughput:
            print(row(peer_case.name, peer_case.rate, *peer_case.latency()))
            print(
                row(
                    ours_case.name,
                    ours_case.rate,
                    *ours_case.latency(),
                    f"{ratio['peer']:.2f}x TiTiler",
                    ">= 3x",
                    verdict(ratio["peer"], 3),
                )
            )
            assert loop_rate is not None
            print(row("bare render loop (1 process)", loop_rate))
            print(
                row(
                    f"  mapsvc uncached, {n} render processes",
                    ours_case.rate,
                    None,
                    None,
                    f"{ratio['loop']:.2f}x loop",
                    f">= {0.9 * n:.1f}x (0.9 N)",
                    verdict(ratio["loop"], 0.9 * n),
                )
            )
            cached = throughput["cached"]
            print(
                row(
                    cached.name,
                    cached.rate,
                    *cached.latency(),
                    f"{cached.rate / peer_case.rate:.1f}x TiTiler unc.",
                )
            )
        if pretiling is not None:
            one, many = pretiling.rate(1), pretiling.rate(n)
            print(row("mapsvc pre-tiling, worker -c 1", one))
            print(
                row(
                    f"mapsvc pre-tiling, worker -c {n}",
                    many,
                    None,
                    None,
                    f"{ratio['pretile']:.2f}x -c 1",
                    f">= {0.9 * n:.1f}x (0.9 N)",
                    verdict(ratio["pretile"], 0.9 * n),
                )
            )
            if loop_rate is not None:
                print(
                    f"  (reference: pre-tiling -c 1 is {one / loop_rate:.2f}x the bare loop,"
                    f" -c {n} {many / loop_rate:.2f}x)"
                )
        for name, values in ratios.items():
            print(f"  per pass, {name}: {', '.join(f'{r:.2f}x' for r in values)}")
        if sizes.rows:
            print_sizes(sizes)
        print("\ngoals (issue 13, medians of the per-pass ratios):")
        if throughput:
            goal("raster tiles, uncached: mapsvc / TiTiler", ratio["peer"], 3, "x")
            goal(
                f"raster tiles, uncached: mapsvc / bare render loop (N = {n})",
                ratio["loop"],
                0.9 * n,
                "x the loop",
            )
        if pretiling is not None:
            goal(f"pre-tiling: worker -c {n} / worker -c 1", ratio["pretile"], 0.9 * n, "x -c 1")
        if any(r[0] == "webp lossless" for r in sizes.rows):
            goal(
                "bytes per tile: lossless WebP / our PNG",
                sizes.mean("webp lossless") / sizes.mean("png"),
                0.75,
                "of the PNG",
                at_most=True,
            )
        print(f"load average (1, 5, 15 min) at the end: {load_average()}")
        if pretiling is not None:
            seconds = {c: [r.get("seconds") for _, r in runs] for c, runs in pretiling.runs.items()}
            print(
                f"pre-tiling: the job's own seconds per run, by processes: {seconds} (tiles/s"
                " above: per second from the job's record to its success)"
            )
            if set(pretiling.stored) != set(tiles):
                print(
                    f"note: pre-tiling covered {len(pretiling.stored)} tiles, the client's list"
                    f" {len(tiles)} (the service plans from the layer's footprint)"
                )
        return 0


if __name__ == "__main__":
    sys.exit(main())
