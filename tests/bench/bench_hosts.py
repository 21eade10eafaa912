"""Pre-tiling on two hosts against one (issue 14): shown, not claimed.

Two "hosts" are two network namespaces this script makes (``ip netns``), each joined to this
machine by a veth pair with addresses of its own (10.231.1.0/24, 10.231.2.0/24) and each with a
host name of its own (``unshare --uts``). Each runs one mapsvc Celery worker with the same
concurrency. They share, over that network only, what hosts of a deployment share: a Redis, a
PostgreSQL cluster and an S3-compatible server (moto) holding the source raster
(``MAPSVC_RASTER_STORE=s3``), all started by this script and listening on the veth addresses. The
API runs outside the namespaces. The work dir (the layer's Mapnik XML and its build, which holds
the copy of the source that configuration fetched from the bucket, and the tile cache) is the
machine's disk, which both namespaces see: on real hosts, a shared volume.

The same pre-tiling job (``nocache=1``, the tile cache cleared first) runs with the first host's
worker alone, then with both: the second must render chunks too (the job's result says what each
worker did), and the ratio of the rates is printed against the goal (at least 1.8 x).

Run as root: ``make bench-hosts`` (also part of ``make bench``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

from shared.raster.paths import encode_id
from tests.bench._harness import (
    Deadline,
    Server,
    admin_key,
    auth_headers,
    free_port,
    goal,
    load_average,
    service_env,
    start,
    wait_http,
)
from tests.bench.bench_tiles import (
    CLI,
    SCENE_REL,
    cached_tiles,
    configure_layer,
    make_cog,
    pretile,
    pretiled_count,
)
from tests.services import PostgresCluster, RedisServer

ROOT = Path(__file__).resolve().parents[2]
RASTER_BUCKET, TILE_BUCKET, S3_KEY = "bench-rasters", "bench-tiles", "bench"
#: the machine's side of host i is 10.231.i.1, the host's own address 10.231.i.2
NET = "10.231.{i}.{n}"


@dataclass(frozen=True)
class Host:
    """One network namespace: its name, its address and the machine's address it reaches."""

    name: str
    addr: str
    gateway: str

    @property
    def netns(self) -> str:
        return f"mapsvc-{self.name}"


def ip(*argv: str, check: bool = True) -> None:
    subprocess.run(["ip", *argv], check=check, capture_output=True)


def make_host(stack: ExitStack, i: int) -> Host:
    """Namespace ``mapsvc-h<i>``, a veth pair to it, addresses and routes; removed at exit."""
    host = Host(f"h{i}", NET.format(i=i, n=2), NET.format(i=i, n=1))
    outside, inside = f"mvs-h{i}", f"mvs-h{i}-in"
    ip("netns", "del", host.netns, check=False)  # left by a run that was killed
    ip("link", "del", outside, check=False)
    ip("netns", "add", host.netns)
    stack.callback(ip, "netns", "del", host.netns, check=False)
    ip("link", "add", outside, "type", "veth", "peer", "name", inside)
    stack.callback(ip, "link", "del", outside, check=False)
    ip("link", "set", inside, "netns", host.netns)
    ip("addr", "add", f"{host.gateway}/24", "dev", outside)
    ip("link", "set", outside, "up")
    for argv in (
        ("addr", "add", f"{host.addr}/24", "dev", inside),
        ("link", "set", inside, "up"),
        ("link", "set", "lo", "up"),
    ):
        ip("netns", "exec", host.netns, "ip", *argv)
    return host


def start_s3(stack: ExitStack, work: Path, port: int) -> Server:
    """moto in server mode, on every address (the hosts reach it at their gateway)."""
    argv = [sys.executable, "-m", "moto.server", "-H", "0.0.0.0", "-p", str(port)]
    return start(stack, "moto", argv, work / "logs" / "moto.log", dict(os.environ), work)


def upload_scene(server: Server, url: str, cog: Path, deadline: Deadline) -> None:
    """The buckets (rasters, tiles) and the scene at its raster path; the local file removed."""
    import boto3
    from botocore.exceptions import BotoCoreError

    s3 = boto3.client(
        "s3", endpoint_url=url, aws_access_key_id=S3_KEY, aws_secret_access_key=S3_KEY
    )
    end = time.monotonic() + deadline.left(30)
    while True:
        server.check()
        try:
            s3.list_buckets()
            break
        except BotoCoreError:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)
    for bucket in (RASTER_BUCKET, TILE_BUCKET):
        s3.create_bucket(Bucket=bucket)
    s3.upload_file(str(cog), RASTER_BUCKET, SCENE_REL)
    cog.unlink()  # read from the bucket only


def make_database(cluster: PostgresCluster) -> None:
    """The service's database with PostGIS, as ``deploy/services.sh`` makes it."""
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE mapsvc")
    with psycopg.connect(cluster.url("mapsvc"), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION postgis")


@dataclass(frozen=True)
class Shared:
    """The ports of what the hosts share; each host reaches them at its gateway address."""

    redis: int
    postgres: int
    s3: int

    def env(self, at: str) -> dict[str, str]:
        return {
            "MAPSVC_REDIS_URL": f"redis://{at}:{self.redis}/0",
            "MAPSVC_DATABASE_URL": f"postgresql+psycopg://postgres@{at}:{self.postgres}/mapsvc",
            "MAPSVC_RASTER_STORE": "s3",
            "MAPSVC_RASTER_S3_BUCKET": RASTER_BUCKET,
            "MAPSVC_S3_BUCKET": TILE_BUCKET,
            "MAPSVC_S3_ENDPOINT_URL": f"http://{at}:{self.s3}",
            "MAPSVC_S3_ACCESS_KEY_ID": S3_KEY,
            "MAPSVC_S3_SECRET_ACCESS_KEY": S3_KEY,
        }


def start_worker(
    stack: ExitStack, host: Host, env: dict[str, str], processes: int, logs: Path, beat: bool
) -> Server:
    """``mapsvc worker`` in the host's namespace, under the host's own name."""
    command = f"hostname {host.name} && exec {' '.join([*CLI, 'worker', '-c', str(processes)])}"
    if not beat:  # one beat in a deployment: the first host's
        command += " --no-beat"
    argv = ["ip", "netns", "exec", host.netns, "unshare", "--uts", "sh", "-c", command]
    return start(stack, f"worker on {host.name}", argv, logs / f"worker-{host.name}.log", env, ROOT)


def wait_workers(url: str, servers: Sequence[Server], names: set[str], deadline: Deadline) -> None:
    """Until exactly the workers ``names`` (Celery names) answer the broker."""
    from celery import Celery

    app = Celery(broker=url)
    end = time.monotonic() + deadline.left(90)
    try:
        while True:
            for server in servers:
                server.check()
            answered = set((app.control.inspect(timeout=0.5).ping() or {}).keys())
            if answered == names:
                return
            if time.monotonic() > end:
                raise TimeoutError(f"workers {sorted(names)} did not answer, only {answered}")
    finally:
        app.close()


def run_job(
    client: httpx.Client,
    api: str,
    layer: str,
    zooms: tuple[int, int],
    cache_dir: Path,
    deadline: Deadline,
) -> tuple[float, dict[str, Any]]:
    """A warm-up over the first zoom (each process loads the map), then the timed run."""
    pretile(client, api, layer, (zooms[0], zooms[0]), deadline)
    shutil.rmtree(cache_dir, ignore_errors=True)
    return pretile(client, api, layer, zooms, deadline)


def main() -> int:  # noqa: C901 - one run, step by step
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=1, help="worker processes per host")
    parser.add_argument("--minzoom", type=int, default=8)
    parser.add_argument("--maxzoom", type=int, default=13, help="the last zoom (included)")
    parser.add_argument("--passes", type=int, default=2, help="runs of each case")
    parser.add_argument("--timeout-s", type=float, default=1200, help="bound of the whole run")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work dir")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_hosts makes network namespaces: run it as root", file=sys.stderr)
        return 2
    deadline = Deadline(args.timeout_s)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    work = Path(tempfile.mkdtemp(prefix="mapsvc-bench-hosts-"))
    logs = work / "logs"
    logs.mkdir()
    key = admin_key()
    zooms = (args.minzoom, args.maxzoom)
    with ExitStack() as stack, httpx.Client(headers=auth_headers(key)) as client:
        if args.keep:
            print(f"work dir (kept): {work}")
        else:
            stack.callback(shutil.rmtree, work, ignore_errors=True)
        hosts = [make_host(stack, i) for i in (1, 2)]
        binds = ["127.0.0.1", *(h.gateway for h in hosts)]
        redis_server = RedisServer(work, binds)
        stack.callback(redis_server.close)
        redis_server.start()
        cluster = PostgresCluster(binds, clients=[NET.format(i=0, n=0) + "/16"])
        stack.callback(cluster.close)
        cluster.init()
        cluster.start()
        make_database(cluster)
        shared = Shared(redis_server.port, cluster.port, free_port())
        moto = start_s3(stack, work, shared.s3)
        services = [moto]
        cog, about = make_cog(work)
        upload_scene(moto, f"http://127.0.0.1:{shared.s3}", cog, deadline)
        base_env = {
            **os.environ,
            "MAPSVC_WORK_DIR": str(work),
            "MAPSVC_LOG_LEVEL": "WARNING",
            **service_env(key),
        }
        port = free_port()
        api_env = {**base_env, **shared.env("127.0.0.1"), "MAPSVC_PORT": str(port)}
        api_env["MAPSVC_HOST"] = "127.0.0.1"
        api_server = start(stack, "mapsvc API", [*CLI, "serve"], logs / "api.log", api_env, ROOT)
        api = f"http://127.0.0.1:{port}/api-user"
        workers = {
            h.name: start_worker(
                stack, h, {**base_env, **shared.env(h.gateway)}, args.processes, logs, h == hosts[0]
            )
            for h in hosts[:1]
        }
        wait_http(client, f"{api}/ready", [api_server, *services], deadline, 120)
        redis_url = shared.env("127.0.0.1")["MAPSVC_REDIS_URL"]
        wait_workers(redis_url, [*services, *workers.values()], {"mapsvc@h1"}, deadline)
        print(f"scene: {about}")
        print(
            f"hosts: {', '.join(f'{h.name} {h.addr} (via {h.gateway})' for h in hosts)};"
            f" Redis :{shared.redis}, PostgreSQL :{shared.postgres}, S3 (moto, the raster)"
            f" :{shared.s3} on {', '.join(binds)};"
            f" {args.processes} worker process(es) per host; {os.cpu_count()} CPUs;"
            f" load {load_average()}"
        )
        configure_layer(client, api, deadline)
        layer = encode_id(SCENE_REL)
        cache_dir = work / "map" / "rtile" / layer
        runs: dict[int, list[tuple[float, dict[str, Any]]]] = {1: [], 2: []}
        for i in range(args.passes):
            for count in (1, 2):
                for h in hosts[1:]:
                    if count == 2 and h.name not in workers:
                        env = {**base_env, **shared.env(h.gateway)}
                        workers[h.name] = start_worker(stack, h, env, args.processes, logs, False)
                    elif count == 1 and h.name in workers:
                        workers.pop(h.name).stop()
                names = {f"mapsvc@{h.name}" for h in hosts[:count]}
                wait_workers(redis_url, [*services, *workers.values()], names, deadline)
                wall, result = run_job(client, api, layer, zooms, cache_dir, deadline)
                did = result.get("workers", {})
                print(
                    f"  run {i + 1}/{args.passes}, {count} host(s): {pretiled_count(result)}"
                    f" tiles in {wall:.2f} s; by worker: {did}"
                )
                if set(did) != names or not all(w["chunks"] for w in did.values()):
                    raise RuntimeError(f"expected chunks by every one of {sorted(names)}: {did}")
                planned, stored = result["plan"]["total"], len(cached_tiles(cache_dir))
                counted = pretiled_count(result)
                if not counted == stored == planned:
                    raise RuntimeError(f"tiles planned {planned}, counted {counted}, kept {stored}")
                runs[count].append((wall, result))
        ratio = statistics.median(
            (pretiled_count(b) or 0) / wb / ((pretiled_count(a) or 0) / wa)
            for (wa, a), (wb, b) in zip(runs[1], runs[2], strict=True)
        )
        print(f"load {load_average()}")
        goal("pre-tiling: two hosts / one host (same processes each)", ratio, 1.8, "x 1 host")
    return 0


if __name__ == "__main__":
    sys.exit(main())
