"""Cached raster tiles: the nginx front and the API against plain nginx on the same files (wrk).

    .venv/bin/python -m tests.bench.bench_front [--seconds 10] [--connections 8]

Configures the Landsat scene of the shared data as a public layer, fills the tile cache with its
tiles at z8–12 through the API, then drives with ``wrk`` (one run, same settings): plain nginx
serving the cache folder (the reference), the front as ``make run`` starts it (anonymous), and
the API itself with an API key (the path of a layer that is not public). Prints req/s and the
ratios with their goals (issue 13: front >= 50% of nginx, with a key >= 35%).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import uuid
from contextlib import ExitStack
from pathlib import Path

import httpx
import morecantile
import rasterio
from rasterio.warp import transform_bounds

from api.front import front_argv, worker_user, write_front_config
from shared.jobs import JobReporter, JobStore
from shared.raster.layer import configure_layer
from shared.raster.paths import encode_id
from shared.redis_clients import sync_client
from shared.settings import Settings
from tests.bench._harness import (
    Deadline,
    admin_key,
    free_port,
    service_env,
    start,
    wait_http,
    wrk_rate,
)

ROOT = Path(__file__).resolve().parents[2]
SCENE = "single/RGB.byte.tif"

_PLAIN_NGINX = """
{user}worker_processes auto;
pid {run}/plain.pid;
error_log {run}/plain-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    types {{ image/png png; }}
    client_body_temp_path {run}/body;
    proxy_temp_path {run}/proxy;
    fastcgi_temp_path {run}/fastcgi;
    uwsgi_temp_path {run}/uwsgi;
    scgi_temp_path {run}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location /api-user/rtile/ {{ alias {tiles}/; }}
    }}
}}
"""


def _tiles(path: Path, minzoom: int, maxzoom: int) -> list[morecantile.Tile]:
    with rasterio.open(path) as src:
        bounds = transform_bounds(src.crs, "EPSG:4326", *src.bounds)
    tms = morecantile.tms.get("WebMercatorQuad")
    return list(tms.tiles(*bounds, zooms=list(range(minzoom, maxzoom + 1))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    args = parser.parse_args()
    if not (shutil.which("wrk") and shutil.which("nginx")):
        print("needs wrk and nginx (deploy/services.sh --test-tools)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-front-"))
    key, layer = admin_key(), encode_id(SCENE)
    port, backend, plain = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        **service_env(key),
        "MAPSVC_WORK_DIR": str(work),
        "MAPSVC_PORT": str(port),
        "MAPSVC_BACKEND_PORT": str(backend),
        "MAPSVC_PUBLIC_LAYERS": layer,
        "MAPSVC_API_WORKERS": "2",
        "MAPSVC_ALLOWED_HOSTS": "127.0.0.1,localhost",
    }
    settings = Settings(
        **{k.removeprefix("MAPSVC_").lower(): v for k, v in env.items() if k.startswith("MAPSVC_")}
    )
    settings.ensure_work_dir()
    shutil.copytree(args.data / "raster" / "single", settings.dirs.raster / "single")
    store = JobStore(sync_client(settings.redis_url), settings)
    job = str(uuid.uuid4())
    store.create(job, "bench", {})
    configure_layer(
        work, SCENE, JobReporter(store, job), lang="en", url_prefix="/api-user", refresh=False
    )
    tiles = _tiles(settings.dirs.raster / SCENE, 8, 12)
    paths = [f"/api-user/rtile/{layer}/en/{t.z}/{t.x}/{t.y}.png" for t in tiles]
    run = (work / "run").resolve()
    deadline = Deadline(900)
    with ExitStack() as stack:
        serve = [sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory", "--loop"]
        serve += ["asyncio", "--host", "127.0.0.1", "--port", str(backend), "--workers", "2"]
        api = start(stack, "api", serve, work / "api.log", env, ROOT)
        front_conf = write_front_config(settings, f"127.0.0.1:{backend}")
        front = start(stack, "front", front_argv(front_conf), work / "front.log", env, ROOT)
        plain_conf = run / "plain.conf"
        plain_conf.write_text(
            _PLAIN_NGINX.format(user=worker_user(), run=run, port=plain, tiles=settings.dirs.rtile)
        )
        plain_argv = ["nginx", "-c", str(plain_conf), "-g", "daemon off;"]
        reference = start(stack, "nginx", plain_argv, work / "plain.log", env, ROOT)
        with httpx.Client(timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
            wait_http(client, f"http://127.0.0.1:{backend}/api-user/health", [api], deadline, 120)
            for path in paths:  # fill the cache through the API
                assert client.get(f"http://127.0.0.1:{backend}{path}").status_code == 200
            wait_http(client, f"http://127.0.0.1:{port}/api-user/health", [front], deadline, 30)
        print(f"{len(paths)} cached tiles of {SCENE} z8-12, wrk -t2 -c{args.connections} "
              f"-d{args.seconds}s, {os.cpu_count()} CPUs, everything on this machine")  # fmt: skip
        runs = {
            "plain nginx, same files": (f"http://127.0.0.1:{plain}", ""),
            "nginx front (make run), anonymous": (f"http://127.0.0.1:{port}", ""),
            "API, with an API key": (f"http://127.0.0.1:{backend}", key),
        }
        rates = {}
        for name, (base, with_key) in runs.items():
            reference.check()
            headers = {"Authorization": f"Bearer {with_key}"} if with_key else {}
            rates[name] = wrk_rate(
                base, paths, headers=headers, seconds=args.seconds, connections=args.connections
            ).rate
            print(f"{name:38} {rates[name]:10.0f} req/s")
    nginx = rates["plain nginx, same files"]
    for name, goal in (("nginx front (make run), anonymous", 0.5), ("API, with an API key", 0.35)):
        ratio = rates[name] / nginx
        verdict = "met" if ratio >= goal else "NOT met"
        print(f"{name:38} {ratio:6.2f} x nginx  (goal >= {goal}: {verdict})")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
