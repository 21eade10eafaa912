"""Benchmark: a user's uncached tiles while a seed of 50,000+ tiles runs on every worker.

Run from the checkout with ``.venv/bin/python -m tests.bench.bench_priority`` (``make bench``
runs it; Redis must be running: ``bash deploy/services.sh``). In one run:

- a temporary work dir holds two layers: the Landsat scene of the demo data
  (``single/RGB.byte.tif``, configured in-process as the job does), which the client asks for,
  and the demo countries, filled and outlined (``tests/styles.py``), which the seed tiles;
- the API (``mapsvc serve``: one process, a render process per CPU) and a worker (``mapsvc
  worker -c <CPUs>``) run as real processes on a flushed Redis db: both in this script's
  session, as ``mapsvc up`` starts them (``--sessions shared``, the default), or each in a
  session of its own, as a service manager does (``--sessions own``: under Linux's autogroup,
  a scheduling group each);
- for each worker nice measured (``--nice``, the setting's default; ``--contrast`` adds 0, the
  worker processes at the API's priority), a worker is started with ``MAPSVC_WORKER_NICE`` and
  its pool processes' nice is read from ``/proc``. One client asks ``--tiles`` Landsat tiles of
  zooms 10-13 one after the other (``@2x`` by default: 512 px, a render of some cost), each
  never asked before (``X-Cache: MISS``: rendered), idle; then a pre-tiling run of the
  countries at zooms 0-8 (87,381 tiles, ``nocache=1``, every worker process) starts, and once
  it renders the client asks as many other tiles. The run's progress is read every second
  meanwhile: it must be running at each reading, and have moved from the first to the last
  (else there is no figure). The run is then cancelled and, its queue drained, the client asks
  as many tiles idle again: idle is both idle phases, before and after, so that a change in
  the machine's load weighs on both sides.

It prints the median and p95 of the phases, their ratios (busy / idle), the seed's tiles per
second and the CPUs its processes used meanwhile. The goal (issue 25): uncached tiles during
the seed within 2 x their idle time, median and p95, at ``--nice``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import morecantile
import rasterio
from rasterio.warp import transform_bounds

from shared.redis_clients import sync_client
from shared.settings import JobSettings
from tests.bench._harness import (
    Deadline,
    Server,
    admin_key,
    auth_headers,
    check_flushable,
    check_loopback,
    configure_scene,
    goal,
    load_average,
    service_settings,
    start,
    summary_line,
    wait_http,
)
from tests.bench.bench_tiles import CLI, ROOT, SCENE, TMS, wait_worker
from tests.styles import write_countries

GOAL = 2.0
#: the seed: the countries' plain style over the world (no bounds: the whole grid), z0-8
SEED_ZOOMS = (0, 8)
SEED_MIN_TILES = 50_000
#: the zooms of the client's tiles (3,701 tiles of the Landsat scene)
CLIENT_ZOOMS = range(10, 14)
#: the run's progress is read this often while the client asks (seconds; and at both ends)
PROGRESS_EVERY_S = 1.0


@dataclass
class Phase:
    """Milliseconds of the client's tiles in one phase."""

    ms: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.ms)

    @property
    def p95(self) -> float:
        return statistics.quantiles(self.ms, n=20, method="inclusive")[-1]

    def line(self, name: str) -> str:
        return (
            f"{name:11} {len(self.ms)} tiles: median {self.median:6.1f} ms, p95 {self.p95:6.1f} ms"
        )


@dataclass
class Result:
    """One worker nice: the client's tiles idle and during the seed."""

    nice: int
    idle: Phase
    busy: Phase

    def ratios(self) -> tuple[float, float]:
        return self.busy.median / self.idle.median, self.busy.p95 / self.idle.p95


def scene_tiles(zooms: list[int]) -> list[morecantile.Tile]:
    """The tiles of the Landsat scene at ``zooms``."""
    with rasterio.open(SCENE) as ds:
        west, south, east, north = transform_bounds(ds.crs, "EPSG:4326", *ds.bounds)
    return list(TMS.tiles(west, south, east, north, zooms=zooms))


def client_tiles(count: int, seed: int) -> list[morecantile.Tile]:
    """``count`` distinct tiles of the Landsat scene at :data:`CLIENT_ZOOMS`, shuffled."""
    tiles = scene_tiles(list(CLIENT_ZOOMS))
    if len(tiles) < count:
        raise SystemExit(f"--tiles: at most {len(tiles)} distinct tiles in all")
    return random.Random(seed).sample(tiles, count)


def tile_url(api: str, layer: str, tile: morecantile.Tile, scale: int = 1) -> str:
    suffix = "@2x" if scale == 2 else ""
    return f"{api}/rtile/{layer}/en/{tile.z}/{tile.x}/{tile.y}{suffix}.png"


def ask(
    client: httpx.Client,
    url_of: Callable[[morecantile.Tile], str],
    tiles: Sequence[morecantile.Tile],
    every: Callable[[], None] | None = None,
) -> Phase:
    """Ask ``tiles`` one after the other, each a miss (rendered); ``every()`` is called before
    the first tile, after the last and every :data:`PROGRESS_EVERY_S` between."""
    ms = []
    last = 0.0
    for tile in tiles:
        if every is not None and time.monotonic() - last >= PROGRESS_EVERY_S:
            every()
            last = time.monotonic()
        url = url_of(tile)
        t0 = time.perf_counter()
        response = client.get(url, timeout=60)
        ms.append((time.perf_counter() - t0) * 1000)
        if response.status_code != 200 or response.headers.get("x-cache") != "MISS":
            raise RuntimeError(
                f"{url}: {response.status_code} X-Cache {response.headers.get('x-cache')}"
                f" {response.text[:300] if response.status_code != 200 else ''}"
            )
    if every is not None:
        every()
    return Phase(ms)


def warm_up(
    client: httpx.Client, url_of: Callable[[morecantile.Tile], str], processes: int
) -> None:
    """Each render process has the layer loaded (tiles of zoom 9, asked ``processes`` at a
    time)."""
    tiles = scene_tiles([9])[: 4 * processes]
    with ThreadPoolExecutor(processes) as pool:
        for response in pool.map(lambda t: client.get(url_of(t), timeout=60), tiles):
            response.raise_for_status()


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command's name (the 3rd field on)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def process_nice(pid: int) -> int:
    """The nice of process ``pid`` (the 19th field of its stat)."""
    return int(_stat(pid)[16])


def cpu_seconds(pids: Sequence[int]) -> float:
    """The CPU time processes ``pids`` used so far (user and system: the 14th, 15th fields)."""
    ticks = sum(int(f[11]) + int(f[12]) for f in map(_stat, pids))
    return ticks / os.sysconf("SC_CLK_TCK")


def pool_pids(redis_url: str) -> list[int]:
    """The pool processes of the one worker on ``redis_url``."""
    from celery import Celery

    app = Celery(broker=redis_url)
    try:
        stats = app.control.inspect(timeout=1).stats() or {}
    finally:
        app.close()
    return [int(pid) for s in stats.values() for pid in s["pool"]["processes"]]


def drained(redis_url: str, deadline: Deadline) -> None:
    """Until the tiles queue is empty (the chunks of a run cancelled before, each skipped)."""
    redis = sync_client(redis_url)
    end = time.monotonic() + deadline.left(120)
    try:
        while redis.llen("tiles"):
            if time.monotonic() > end:
                raise TimeoutError("the tiles queue is not drained after 120 s")
            time.sleep(0.2)
    finally:
        redis.close()


class Seed:
    """A pre-tiling run of the countries, started through the API."""

    def __init__(self, client: httpx.Client, api: str, layer: str) -> None:
        self.client, self.api = client, api
        params: dict[str, Any] = {"minzoom": SEED_ZOOMS[0], "maxzoom": SEED_ZOOMS[1] + 1}
        url = f"{api}/gis-layer-pretile/{layer}"
        plan = client.get(url, params={**params, "dryrun": 1}, timeout=60).json()
        self.total = int(plan["total"])
        if self.total < SEED_MIN_TILES:
            raise RuntimeError(f"the seed plans {self.total} tiles, fewer than {SEED_MIN_TILES}")
        response = client.get(url, params={**params, "nocache": 1, "async": 1}, timeout=60)
        if response.status_code != 202:
            raise RuntimeError(f"gis-layer-pretile: {response.status_code} {response.text[:300]}")
        self.id = response.json()["id"]
        #: (seconds, tiles done) at each reading
        self.readings: list[tuple[float, float]] = []

    def job(self) -> dict[str, Any]:
        job: dict[str, Any] = self.client.get(f"{self.api}/jobs/{self.id}", timeout=10).json()
        return job

    def read(self) -> None:
        """Record the run's progress (tiles done): it must be running, short of its end."""
        job = self.job()
        done = float(job.get("progress") or 0.0) * self.total
        if job.get("state") != "running":
            raise RuntimeError(f"the seed is {job.get('state')} ({done:.0f} tiles done)")
        if done >= self.total:
            raise RuntimeError("the seed ended during the measurement: no figure")
        self.readings.append((time.monotonic(), done))

    def moved(self) -> float:
        """The longest time the run's count stood still between readings (it may: it yields
        to the client); raises unless the run moved from the first reading to the last."""
        if len(self.readings) < 2 or self.readings[-1][1] <= self.readings[0][1]:
            raise RuntimeError(f"the seed did not move: {self.readings}")
        longest, since = 0.0, self.readings[0]
        for t, done in self.readings[1:]:
            if done > since[1]:
                since = (t, done)
            longest = max(longest, t - since[0])
        return longest

    def wait_rendering(self, deadline: Deadline, settle_s: float) -> None:
        """Until the run renders chunks, then ``settle_s`` more (every worker process busy)."""
        end = time.monotonic() + deadline.left(120)
        while True:
            job = self.job()
            if job.get("state") == "running" and (job.get("progress") or 0) > 0:
                break
            if job.get("state") in ("failed", "cancelled", "succeeded"):
                raise RuntimeError(f"the seed ended before the measurement: {job}")
            if time.monotonic() > end:
                raise TimeoutError(f"the seed did not start rendering: {job}")
            time.sleep(0.2)
        time.sleep(settle_s)

    def rate(self) -> float:
        (t0, d0), (t1, d1) = self.readings[0], self.readings[-1]
        return (d1 - d0) / (t1 - t0)

    def cancel(self, deadline: Deadline) -> str:
        """Cancel the run; its final state."""
        self.client.delete(f"{self.api}/jobs/{self.id}", timeout=30)
        end = time.monotonic() + deadline.left(60)
        while time.monotonic() < end:
            state = str(self.job().get("state"))
            if state in ("cancelled", "failed", "succeeded"):
                return state
            time.sleep(0.3)
        raise TimeoutError(f"the seed {self.id} was not cancelled within 60 s")


@dataclass
class Bench:
    """What every measured nice shares: the API, its client, the layers, the tiles left."""

    client: httpx.Client
    api: str
    api_server: Server
    env: dict[str, str]
    redis_url: str
    logs: Path
    landsat: str
    countries: str
    tiles: list[morecantile.Tile]
    per_phase: int
    scale: int
    own_session: bool
    deadline: Deadline

    def url(self, tile: morecantile.Tile) -> str:
        """The client's URL of ``tile``."""
        return tile_url(self.api, self.landsat, tile, self.scale)

    def take(self) -> list[morecantile.Tile]:
        taken, self.tiles = self.tiles[: self.per_phase], self.tiles[self.per_phase :]
        return taken

    def measure(self, nice: int) -> Result:
        processes = os.cpu_count() or 1
        with ExitStack() as stack:
            env = {**self.env, "MAPSVC_WORKER_NICE": str(nice)}
            argv = [*CLI, "worker", "-c", str(processes)]
            log = self.logs / f"worker-nice-{nice}.log"
            worker = start(
                stack, "mapsvc worker", argv, log, env, ROOT, own_session=self.own_session
            )
            wait_worker(self.redis_url, worker, processes, self.deadline)
            drained(self.redis_url, self.deadline)
            pids = pool_pids(self.redis_url)
            nices = [process_nice(pid) for pid in pids]
            group = Path(f"/proc/{worker.popen.pid}/autogroup")
            group_nice = group.read_text().split()[-1] if group.exists() else "none"
            print(
                f"\nworkers at MAPSVC_WORKER_NICE={nice}: pool processes' nice {nices},"
                f" the worker's autogroup's nice {group_nice}"
            )
            if len(nices) != processes or any(n < min(nice, 19) for n in nices):
                raise RuntimeError(f"the worker processes run at nice {nices}, not {nice}")
            before = ask(self.client, self.url, self.take())
            print(f"  {before.line('idle before')}")
            seed = Seed(self.client, self.api, self.countries)
            try:
                seed.wait_rendering(self.deadline, settle_s=3.0)
                t0, cpu0 = time.monotonic(), cpu_seconds(pids)
                busy = ask(self.client, self.url, self.take(), every=seed.read)
                cpus = (cpu_seconds(pids) - cpu0) / (time.monotonic() - t0)
            finally:
                state = seed.cancel(self.deadline)
            still = seed.moved()
            print(f"  {busy.line('busy')}")
            drained(self.redis_url, self.deadline)
            time.sleep(1.0)  # the chunks running when the run was cancelled end
            after = ask(self.client, self.url, self.take())
            print(f"  {after.line('idle after')}")
            idle = Phase(before.ms + after.ms)
            print(f"  {idle.line('idle')}")
            first, last = seed.readings[0][1], seed.readings[-1][1]
            print(
                f"  the seed ({seed.total} tiles, zooms {SEED_ZOOMS[0]}-{SEED_ZOOMS[1]}) ran the"
                f" whole time: {first:.0f} -> {last:.0f} tiles done, {seed.rate():.0f} tiles/s,"
                f" its processes using {cpus:.2f} CPUs (its count stood still {still:.1f} s at"
                f" most); then {state}"
            )
            result = Result(nice, idle, busy)
            median, p95 = result.ratios()
            print(f"  busy / idle: median {median:.2f}x, p95 {p95:.2f}x")
            self.api_server.check()
            return result


def report(results: list[Result], measured: int, sessions: str) -> None:
    """The figures; the goal lines are those of nice ``measured``, the others a contrast."""
    print(f"\nload average (1, 5, 15 min) at the end: {load_average()}")
    print("\ngoal (issue 25): uncached tiles during a 50k-tile seed within 2 x their idle time")
    for result in results:
        median, p95 = result.ratios()
        what = f"priority: uncached tiles during a 50k-tile seed, nice {result.nice}"
        if result.nice == measured:
            goal(f"{what}, median", median, GOAL, "x idle time", at_most=True)
            goal(f"{what}, p95", p95, GOAL, "x idle time", at_most=True)
        else:
            summary_line(
                f"{what + ' (contrast)':58} median {median:.2f}x, p95 {p95:.2f}x idle time"
                f" (sessions {sessions})"
            )


def main() -> int:
    default = JobSettings.model_fields["worker_nice"].default
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nice", type=int, default=default, help="MAPSVC_WORKER_NICE measured")
    parser.add_argument("--contrast", action="store_true", help="measure nice 0 too")
    parser.add_argument("--tiles", type=int, default=60, help="client tiles per phase")
    parser.add_argument(
        "--sessions",
        choices=["shared", "own"],
        default="shared",
        help="API and worker in this script's session (as mapsvc up), or each in its own",
    )
    parser.add_argument("--scale", type=int, choices=[1, 2], default=2, help="1: 256 px tiles")
    parser.add_argument("--seed", type=int, default=25, help="of the client's tile sample")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/8", help="flushed first")
    parser.add_argument("--timeout-s", type=float, default=900)
    parser.add_argument("--keep", action="store_true", help="keep the temporary work dir")
    args = parser.parse_args()
    check_loopback(args.redis, "--redis")
    check_flushable(args.redis)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    nices = [args.nice, *([0] if args.contrast and args.nice != 0 else [])]
    deadline = Deadline(args.timeout_s)
    key = admin_key()
    work = Path(tempfile.mkdtemp(prefix="mapsvc-bench-priority-"))
    logs = work / "logs"
    logs.mkdir()
    redis = sync_client(args.redis)
    redis.flushdb()
    try:
        env, settings = service_settings(
            key,
            work,
            MAPSVC_REDIS_URL=args.redis,
            MAPSVC_HOST="127.0.0.1",
            MAPSVC_LOG_LEVEL="WARNING",
            MAPSVC_API_WORKERS="1",
        )
        landsat = configure_scene(settings, SCENE, "bench/landsat.tif")
        countries, _ = write_countries(settings.dirs.mapnik)
        tiles = client_tiles(3 * args.tiles * len(nices), args.seed)
        own = args.sessions == "own"
        with ExitStack() as stack, httpx.Client(headers=auth_headers(key)) as client:
            api_server = start(
                stack, "mapsvc API", [*CLI, "serve"], logs / "api.log", env, ROOT, own_session=own
            )
            api = f"http://127.0.0.1:{settings.port}/api-user"
            wait_http(client, f"{api}/health", [api_server], deadline, 120)
            processes = settings.tiles.render_processes or os.cpu_count() or 1
            print(
                f"{os.cpu_count()} CPUs; load average (1, 5, 15 min) before: {load_average()}\n"
                f"API: one process, {processes} render processes (nice +5); worker: -c"
                f" {os.cpu_count()}; sessions: {args.sessions}; client: {args.tiles} uncached"
                f" Landsat tiles of zooms {CLIENT_ZOOMS[0]}-{CLIENT_ZOOMS[-1]} per phase, one"
                " at a time"
            )
            bench = Bench(
                client, api, api_server, env, args.redis, logs, landsat, countries, tiles,
                args.tiles, args.scale, own, deadline,
            )  # fmt: skip
            warm_up(client, bench.url, processes)
            results = [bench.measure(nice) for nice in nices]
        report(results, args.nice, args.sessions)
    finally:
        redis.flushdb()
        redis.close()
        if args.keep:
            print(f"work dir (kept): {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
