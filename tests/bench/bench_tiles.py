"""Benchmark: raster tiles against TiTiler: uncached rendering, cached tiles and pre-tiling.

Run from the checkout with ``make bench`` (or ``.venv/bin/python -m tests.bench.bench_tiles``);
Redis and PostgreSQL must be running (``bash deploy/services.sh``). In one run, on this machine:

- a Cloud-Optimized GeoTIFF of the shared Landsat scene (``single/RGB.byte.tif``) is written to
  ``<tmp work dir>/map/raster/bench/landsat.tif``; both servers serve that one file;
- TiTiler (``titiler.application``, installed into a virtualenv of its own, reused between runs)
  runs under ``uvicorn --workers N``; mapsvc runs its API (``mapsvc serve``: one process by
  default, ``--api-workers``; N render processes each) and a worker (``mapsvc worker -c N``) on a
  Redis db of their own (db 8, flushed first), with a random admin key (``MAPSVC_ADMIN_API_KEY``)
  that every request to it carries, and quotas it does not reach;
- the same tiles (every tile of zooms 8-12 over the scene's footprint) are requested from both
  with the same client concurrency; each case is measured in several passes, interleaved between
  the servers: tiles/s is the median pass, p50/p95 are over all requests of a case;
- pre-tiling (a job with N worker processes) is compared with one process that loads the layer's
  Mapnik XML and renders the tiles the job made one by one, encoded with the service's PNG
  options; job runs and loop runs alternate.

Targets (from the issue): uncached throughput >= 1.5x TiTiler's; cached tiles >= 20x TiTiler's
uncached throughput; pre-tiling with N processes >= 0.9 x N x the single-process render loop.
"""

from __future__ import annotations

import argparse
import asyncio
import os
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
import morecantile
import rasterio
import rasterio.shutil
from rasterio.warp import transform_bounds

from shared.raster.paths import encode_id
from shared.redis_clients import sync_client
from tests.bench._harness import (
    Deadline,
    HttpConnection,
    Server,
    admin_key,
    auth_headers,
    auth_lines,
    free_port,
    load_average,
    service_env,
    start,
    wait_http,
)

ROOT = Path(__file__).resolve().parents[2]
SCENE = ROOT.parent / "shared" / "data" / "raster" / "single" / "RGB.byte.tif"
SCENE_REL = "bench/landsat.tif"
TITILER_REQUIREMENTS = ("titiler.application>=0.18,<3", "uvicorn[standard]>=0.30,<1")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LANG_TOKEN = "{{lang}}"  # ``shared.tiles.styles.LANG_TOKEN``
TMS = morecantile.tms.get("WebMercatorQuad")


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


# --- the client -------------------------------------------------------------------------------


@dataclass
class Pass:
    """One pass over the tiles: wall time, per-request latency, what came back."""

    seconds: float
    latencies_ms: list[float]
    answers: Counter[str] = field(default_factory=Counter)
    cache: Counter[str] = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return len(self.latencies_ms) / self.seconds


async def _run_pass(urls: Sequence[str], concurrency: int, timeout_s: float, auth: str) -> Pass:
    latencies: list[float] = []
    answers: Counter[str] = Counter()
    cache: Counter[str] = Counter()
    first = urlsplit(urls[0])
    host, port = first.hostname or "127.0.0.1", first.port or 80
    pending: Iterator[str] = iter(urls)

    async def fetch() -> None:
        connection = HttpConnection(host, port, auth)
        try:
            for url in pending:
                parts = urlsplit(url)
                target = f"{parts.path}?{parts.query}" if parts.query else parts.path
                t0 = time.perf_counter()
                try:
                    status, headers, body = await asyncio.wait_for(
                        connection.get(target), timeout_s
                    )
                except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
                    latencies.append((time.perf_counter() - t0) * 1000)
                    answers[f"error {type(exc).__name__}"] += 1
                    connection.close()
                    continue
                latencies.append((time.perf_counter() - t0) * 1000)
                kind = headers.get("content-type", "-").split(";")[0]
                if status == 200 and not body.startswith(PNG_MAGIC):
                    kind += " (not a PNG)"
                answers[f"{status} {kind}"] += 1
                cache[headers.get("x-cache", "-")] += 1
        finally:
            connection.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(fetch() for _ in range(concurrency)))
    return Pass(time.perf_counter() - t0, latencies, answers, cache)


def run_pass(urls: Sequence[str], concurrency: int, deadline: Deadline, auth: str = "") -> Pass:
    """One pass over ``urls`` with ``concurrency`` connections (uvloop when installed).

    ``auth``: header lines added to every request (``auth_lines(key)`` for mapsvc).
    """

    async def bounded() -> Pass:
        return await asyncio.wait_for(
            _run_pass(urls, concurrency, deadline.left(120), auth), deadline.left()
        )

    try:
        import uvloop
    except ImportError:
        return asyncio.run(bounded())
    return uvloop.run(bounded())


@dataclass
class Case:
    """The passes of one measured case, and its summary."""

    name: str
    passes: list[Pass] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return statistics.median(p.rate for p in self.passes)

    def latency(self) -> tuple[float, float]:
        """p50 and p95 (ms) over every request of every pass."""
        cuts = statistics.quantiles(
            [ms for p in self.passes for ms in p.latencies_ms], n=100, method="inclusive"
        )
        return cuts[49], cuts[94]

    def answers(self) -> str:
        total: Counter[str] = Counter()
        for p in self.passes:
            total.update(p.answers)
        return ", ".join(f"{n // len(self.passes)} x {k}" for k, n in total.most_common())

    def suspect(self) -> list[str]:
        """Answers that are neither a PNG nor a plain 204/404 for a tile without data."""
        kinds = {k for p in self.passes for k in p.answers}
        return sorted(
            k for k in kinds if not (k == "200 image/png" or k.startswith(("204 ", "404 ")))
        )

    def cache(self) -> str:
        total: Counter[str] = Counter()
        for p in self.passes:
            total.update(p.cache)
        return ", ".join(f"{n // len(self.passes)} x {k}" for k, n in sorted(total.items()))


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


def titiler_template(client: httpx.Client, base: str, cog: Path) -> str:
    """The tile URL template of the installed TiTiler (its routes changed between versions)."""
    paths: dict[str, Any] = {}
    for doc in ("/api", "/openapi.json"):
        response = client.get(base + doc, timeout=30)
        if response.status_code == 200 and "paths" in response.json():
            paths = response.json()["paths"]
            break
    routes = [p for p in paths if p.startswith("/cog/tiles/") and "{z}/{x}/{y}" in p]
    routes = [p for p in routes if "@" not in p]  # 0.x: the @{scale}x variant
    if not routes:
        raise RuntimeError(f"no /cog/tiles route in TiTiler's OpenAPI: {sorted(paths)[:20]}")
    # with the tile matrix set in the path first, and with the format suffix first
    route = sorted(routes, key=lambda p: ("{z}" in p.split("/")[3], not p.endswith(".{format}")))[0]
    query = f"url={quote(str(cog), safe='/')}"
    parts = []
    for part in route.split("/"):
        if part.lower() in ("{tilematrixsetid}", "{tile_matrix_set_id}"):
            part = "WebMercatorQuad"
        parts.append(part)
    route = "/".join(parts)
    if route.endswith(".{format}"):
        route = route[: -len(".{format}")] + ".png"
    else:
        query += "&format=png"
    return f"{base}{route}?{query}"


# --- mapsvc -----------------------------------------------------------------------------------


def wait_job(
    client: httpx.Client, api: str, job_id: str, deadline: Deadline, limit_s: float
) -> dict[str, Any]:
    """The descriptor of a job once it succeeded (polling); raises when it failed or lingered."""
    end = time.monotonic() + deadline.left(limit_s)
    while True:
        job: dict[str, Any] = client.get(f"{api}/jobs/{job_id}", timeout=10).json()
        if job.get("state") == "succeeded":
            return job
        if job.get("state") in ("failed", "cancelled"):
            raise RuntimeError(f"job {job_id} {job['state']}: {job.get('error')}")
        if time.monotonic() > end:
            raise TimeoutError(f"job {job_id} still {job.get('state')} after {limit_s:.0f} s")
        time.sleep(0.05)


def configure_layer(client: httpx.Client, api: str, deadline: Deadline) -> dict[str, Any]:
    response = client.get(f"{api}/gis-raster/{SCENE_REL}", params={"nocache": 1}, timeout=120)
    if response.status_code == 202:
        return dict(wait_job(client, api, response.json()["id"], deadline, 300)["result"])
    if response.status_code != 200:
        raise RuntimeError(f"configuring {SCENE_REL}: {response.status_code} {response.text}")
    return dict(response.json())


def pretile(
    client: httpx.Client,
    api: str,
    layer: str,
    zooms: tuple[int, int],
    deadline: Deadline,
) -> tuple[float, dict[str, Any]]:
    """Wall seconds from the request to the job's success (polled every 50 ms), and its result.

    ``zooms`` are the first and last zoom; the service's ``maxzoom`` is the end, excluded.
    """
    params = {"minzoom": zooms[0], "maxzoom": zooms[1] + 1, "nocache": 1, "async": 1}
    t0 = time.perf_counter()
    response = client.get(f"{api}/gis-layer-pretile/{layer}", params=params, timeout=60)
    if response.status_code != 202:
        raise RuntimeError(f"gis-layer-pretile: {response.status_code} {response.text[:500]}")
    job = wait_job(client, api, response.json()["id"], deadline, 900)
    return time.perf_counter() - t0, dict(job["result"] or {})


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


def png_format() -> str:
    """The service's PNG options, so that the loop and the service encode alike."""
    from shared.tiles.render import PNG_FORMAT

    return PNG_FORMAT


def mapnik_loop(xml: Path, tiles: Sequence[morecantile.Tile], deadline: Deadline) -> float:
    """Seconds one process takes to render ``tiles`` one by one from the layer's XML, as PNG."""
    from shared.mapnik_env import mapnik  # mapnik only through here: it breaks PROJ otherwise

    fmt = png_format()

    m = mapnik.Map(256, 256)
    mapnik.load_map_from_string(
        m, xml.read_text().replace(LANG_TOKEN, "en"), False, str(xml.parent) + os.sep
    )
    t0 = time.perf_counter()
    for tile in tiles:
        b = TMS.xy_bounds(tile)
        m.zoom_to_box(mapnik.Box2d(b.left, b.bottom, b.right, b.top))
        image = mapnik.Image(256, 256)
        mapnik.render(m, image)
        image.to_string(fmt)
        deadline.left()
    return time.perf_counter() - t0


# --- the report -------------------------------------------------------------------------------


def verdict(ratio: float, target: float) -> str:
    return "met" if ratio >= target else "NOT met"


def row(
    name: str,
    rate: float,
    p50: float | None,
    p95: float | None,
    ratio: str = "",
    target: str = "",
    result: str = "",
) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    return f"{name:44} {rate:9.1f} {ms(p50):>8} {ms(p95):>8}  {ratio:>18}  {target:>14}  {result}"


def header() -> str:
    return (
        f"{'case':44} {'tiles/s':>9} {'p50 ms':>8} {'p95 ms':>8}  {'ratio':>18}  {'target':>14}"
        "  result"
    )


# --- the run ----------------------------------------------------------------------------------


def measure(
    cases: Sequence[tuple[Case, Sequence[str], Callable[[], None] | None]],
    passes: int,
    concurrency: int,
    deadline: Deadline,
    auth: Callable[[Case], str] = lambda case: "",
) -> None:
    """``passes`` rounds over the cases in turn; each case's optional hook runs before its pass.

    ``auth``: the header lines a case's requests carry (mapsvc's admin key).
    """
    for i in range(passes):
        for case, urls, before in cases:
            if before is not None:
                before()
            result = run_pass(urls, concurrency, deadline, auth(case))
            case.passes.append(result)
            print(
                f"  pass {i + 1}/{passes} {case.name}: {result.rate:.1f} tiles/s"
                f" ({result.seconds:.2f} s)",
                flush=True,
            )


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
) -> tuple[list[Server], str]:
    """The API and a worker with ``-c n`` on the work dir and a flushed Redis db, once ready.

    ``key`` is their admin key (``MAPSVC_ADMIN_API_KEY``): ``client`` must send it.
    """
    if urlsplit(redis_url).path.strip("/") in ("", "0", "12", "13"):
        raise RuntimeError(f"{redis_url}: not flushing the service's or the tests' Redis db")
    redis = sync_client(redis_url)
    redis.flushdb()
    stack.callback(redis.close)
    stack.callback(redis.flushdb)  # after the servers stopped (callbacks run last in, first out)
    port = free_port()
    env = {
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
    cli = [sys.executable, "-m", "api.cli"]
    servers = [
        start(stack, "mapsvc API", [*cli, "serve"], logs / "api.log", env, ROOT),
        start(
            stack, "mapsvc worker", [*cli, "worker", "-c", str(n)], logs / "worker.log", env, ROOT
        ),
    ]
    api = f"http://127.0.0.1:{port}/api-user"
    try:
        wait_http(client, f"{api}/ready", servers, deadline, 120)
    except TimeoutError as exc:
        raise RuntimeError(f"mapsvc is not ready (run `bash deploy/services.sh`?): {exc}") from exc
    return servers, api


@dataclass
class Pretiling:
    """Pre-tiling runs (wall seconds, job result) and single-process loop runs over its tiles."""

    runs: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    loops: list[float] = field(default_factory=list)
    stored: list[morecantile.Tile] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Median over the runs of tiles rendered per wall second."""
        return statistics.median(
            (pretiled_count(r) or len(self.stored)) / wall for wall, r in self.runs
        )

    @property
    def loop_rate(self) -> float:
        return len(self.stored) / statistics.median(self.loops)


def measure_pretiling(
    client: httpx.Client,
    api: str,
    layer: str,
    zooms: tuple[int, int],
    cache_dir: Path,
    xml: Path,
    passes: int,
    deadline: Deadline,
) -> Pretiling:
    """Runs of the job, each followed by a run of the plain loop over the tiles it stored."""
    out = Pretiling()
    for i in range(passes):
        shutil.rmtree(cache_dir, ignore_errors=True)
        wall, result = pretile(client, api, layer, zooms, deadline)
        out.runs.append((wall, result))
        out.stored = cached_tiles(cache_dir)
        print(
            f"  run {i + 1}/{passes} pre-tiling: {pretiled_count(result)} tiles in {wall:.2f} s"
            f" (the job's own {result.get('seconds', '-')} s)"
        )
        seconds = mapnik_loop(xml, out.stored, deadline)
        out.loops.append(seconds)
        print(
            f"  run {i + 1}/{passes} Mapnik loop: {len(out.stored)} tiles in {seconds:.2f} s"
            f" ({len(out.stored) / seconds:.1f} tiles/s)"
        )
    return out


def print_report(
    n: int,
    uncached: Sequence[Case],
    cached: Case,
    pretiling: Pretiling,
) -> None:
    peer, *ours = uncached
    print(f"\n{header()}")
    print(row(peer.name, peer.rate, *peer.latency()))
    for case in ours:
        ratio = case.rate / peer.rate
        print(
            row(
                case.name,
                case.rate,
                *case.latency(),
                f"{ratio:.2f}x TiTiler",
                ">= 1.5x",
                verdict(ratio, 1.5),
            )
        )
    ratio = cached.rate / peer.rate
    print(
        row(
            cached.name,
            cached.rate,
            *cached.latency(),
            f"{ratio:.1f}x TiTiler unc.",
            ">= 20x",
            verdict(ratio, 20),
        )
    )
    print(row("plain Mapnik render loop (1 process)", pretiling.loop_rate, None, None))
    ratio = pretiling.rate / pretiling.loop_rate
    print(
        row(
            f"mapsvc pre-tiling (worker -c {n})",
            pretiling.rate,
            None,
            None,
            f"{ratio:.2f}x loop",
            f">= {0.9 * n:.1f}x (0.9 N)",
            verdict(ratio, 0.9 * n),
        )
    )
    print("\nanswers per pass (status, content type; X-Cache):")
    for case in [*uncached, cached]:
        print(f"  {case.name}: {case.answers()}; X-Cache: {case.cache()}")
        if case.suspect():
            print(f"  WARNING: {case.name} had unexpected answers: {', '.join(case.suspect())}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="N: server and worker processes")
    parser.add_argument(
        "--api-workers", type=int, default=1, help="mapsvc API processes (MAPSVC_API_WORKERS)"
    )
    parser.add_argument("--concurrency", type=int, default=8, help="client requests in flight")
    parser.add_argument("--passes", type=int, default=3, help="passes (runs) per case")
    parser.add_argument(
        "--cached-rounds", type=int, default=5, help="rounds over the tiles per cached pass"
    )
    parser.add_argument("--minzoom", type=int, default=8)
    parser.add_argument("--maxzoom", type=int, default=12, help="the last zoom (included)")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/8", help="flushed first")
    parser.add_argument(
        "--titiler-venv",
        type=Path,
        default=Path(tempfile.gettempdir()) / "mapsvc-bench" / "titiler-venv",
        help="made and installed when missing, reused otherwise",
    )
    parser.add_argument("--timeout-s", type=float, default=1800, help="bound of the whole run")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work dir")
    parser.add_argument(
        "--titiler-only", action="store_true", help="measure TiTiler alone (checks the harness)"
    )
    args = parser.parse_args()
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
        venv, versions = titiler_venv(args.titiler_venv, deadline)
        titiler, titiler_base = start_titiler(stack, venv, n, logs, client, deadline)
        titiler_template_url = titiler_template(client, titiler_base, cog)
        titiler_urls = [url_of(titiler_template_url, t) for t in tiles]
        per_zoom = ", ".join(f"z{z}: {c}" for z, c in sorted(Counter(t.z for t in tiles).items()))
        print(f"scene: {about}")
        print(
            f"tiles: {len(tiles)} of zooms {args.minzoom}-{args.maxzoom} ({per_zoom}); client"
            f" concurrency {args.concurrency}; {args.passes} passes per case; N = {n};"
            f" {os.cpu_count()} CPUs"
        )
        print(f"TiTiler: {versions}; uvicorn --workers {n}; {titiler_urls[0]}")
        print(f"load average (1, 5, 15 min) before measuring: {load_average()}")
        if os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1):
            print("WARNING: the machine is busy with other work: every figure will be skewed")

        # warm-up: every server process opens the file and loads its libraries, untimed
        warm = slice(None, None, max(1, len(tiles) // 64))
        run_pass(titiler_urls[warm], args.concurrency, deadline)
        titiler_case = Case("TiTiler uncached")
        if args.titiler_only:
            print("measuring TiTiler ...", flush=True)
            measure([(titiler_case, titiler_urls, None)], args.passes, args.concurrency, deadline)
            print(f"\n{header()}")
            print(row(titiler_case.name, titiler_case.rate, *titiler_case.latency()))
            print(f"answers per pass: {titiler_case.answers()}")
            return 0

        servers, api = start_mapsvc(
            stack, work, n, args.redis, args.api_workers, logs, client, deadline, key
        )
        config = configure_layer(client, api, deadline)
        layer = str(config["layer"])
        if layer != encode_id(SCENE_REL):
            raise RuntimeError(f"layer {layer!r} is not the id of {SCENE_REL}")
        origin = api.removesuffix("/api-user")
        mapsvc_urls = [url_of(f"{origin}{config['url']}", t) for t in tiles]
        nocache_urls = [f"{u}?nocache=1" for u in mapsvc_urls]
        cache_dir = work / "map" / "rtile" / layer
        print(
            f"mapsvc: API (MAPSVC_API_WORKERS={args.api_workers}, MAPSVC_RENDER_PROCESSES={n}"
            f" each) + worker -c {n};"
            f" {mapsvc_urls[0]}"
        )
        print(
            "uncached mapsvc is measured both ways: nocache=1 (rendered, nothing stored), and"
            " with the layer's cache folder deleted before each pass (rendered and stored, MISS)"
        )
        auth = auth_lines(key)
        run_pass(nocache_urls[warm], args.concurrency, deadline, auth)
        nocache_case = Case("mapsvc uncached (nocache=1)")
        cold_case = Case("mapsvc uncached (cache cleared: MISS)")
        print("measuring uncached rendering ...", flush=True)
        measure(
            [
                (titiler_case, titiler_urls, None),
                (nocache_case, nocache_urls, None),
                (cold_case, mapsvc_urls, lambda: shutil.rmtree(cache_dir, ignore_errors=True)),
            ],
            args.passes,
            args.concurrency,
            deadline,
            lambda case: "" if case is titiler_case else auth,
        )
        titiler.stop()  # not needed any more: its processes leave the CPUs to the rest
        for server in servers:
            server.check()

        cached_case = Case("mapsvc cached (HIT)")  # the last cold pass filled the cache
        print(f"measuring cached tiles (each pass asks every tile {args.cached_rounds} times) ...")
        cached_urls = mapsvc_urls * args.cached_rounds  # a pass of one round lasts < 1 s
        measure(
            [(cached_case, cached_urls, None)],
            args.passes,
            args.concurrency,
            deadline,
            lambda case: auth,
        )

        xml = work / "map" / "mapnik" / f"{layer}.xml"
        print(
            "measuring pre-tiling (nocache=1, cache folder cleared before each run), each run"
            f" followed by the plain Mapnik loop: the tiles the job stored, from"
            f" {xml.relative_to(work)}, rendered one by one as {png_format()!r} ..."
        )
        pretiling = measure_pretiling(
            client,
            api,
            layer,
            (args.minzoom, args.maxzoom),
            cache_dir,
            xml,
            args.passes,
            deadline,
        )
        print_report(n, [titiler_case, nocache_case, cold_case], cached_case, pretiling)
        print(f"load average (1, 5, 15 min) at the end: {load_average()}")
        zooms = pretiling.runs[-1][1].get("zooms") or []
        print(
            "pre-tiling, last run: "
            + ", ".join(f"z{z.get('zoom')}: {z.get('rendered')}" for z in zooms)
            + f"; the job's own seconds per run: {[r.get('seconds') for _, r in pretiling.runs]}"
            " (tiles/s above: per wall second, from the request to the job's success)"
        )
        if set(pretiling.stored) != set(tiles):
            print(
                f"note: pre-tiling covered {len(pretiling.stored)} tiles, the client's list"
                f" {len(tiles)} (the service plans from the layer's footprint)"
            )
        return 0


if __name__ == "__main__":
    sys.exit(main())
