"""Benchmark: WMS GetMap against MapServer 8 (FastCGI behind nginx) on the same raster.

Run from the checkout with ``make bench`` (or ``.venv/bin/python -m tests.bench.bench_wms``);
Redis and PostgreSQL must be running (``bash deploy/services.sh``). MapServer (Debian's
``mapserver-bin``: ``mapserv``), ``spawn-fcgi``, nginx and ``wrk`` are installed when missing
(as root; ``deploy/services.sh --test-tools`` installs them too). In one run, on this machine:

- the shared Landsat scene (``single/RGB.byte.tif``: 8-bit RGB, EPSG:32618, nodata 0) as a COG,
  written where ``bench_tiles`` writes it (``<tmp work dir>/map/raster/bench/landsat.tif``);
  both servers read that one file and resample it bilinearly;
- mapsvc: its API (``mapsvc serve``, N render processes, one API process) on a Redis db of its
  own (db 6, flushed first), as ``bench_tiles`` starts it; the layer configured through the
  API (``gis-raster``, ``resampling=bilinear``) by the worker, which is then stopped;
- MapServer: ``mapserv`` as N FastCGI processes (``spawn-fcgi``, a unix socket) behind an nginx
  of its own (``fastcgi_pass``, ``fastcgi_param MS_MAPFILE``, the answers buffered in memory);
  the mapfile draws the COG with ``PROCESSING "RESAMPLE=BILINEAR"`` and ``"NODATA=0"`` into
  ``AGG/PNG`` RGBA (its default compression), WMS GetMap in EPSG:3857;
- the cases: 256x256 and 1024x768 maps, each ``TRANSPARENT=TRUE`` and ``FALSE`` (the WMS
  default), PNG, EPSG:3857, over ``--boxes`` boxes inside the scene's data (a fixed random draw,
  map pixels of 50-150 m: the scene's ~330 m upsampled), asked in turn, so that no answer can
  come from a cache (neither server caches a GetMap); then ``--clients`` (8) clients asking
  1024x768 maps at once (mapsvc renders ``MAPSVC_RENDER_MAX_LARGE`` maps larger than a tile at
  a time per API process, the others wait their turn within ``MAPSVC_RENDER_TIMEOUT_S``);
- checks first: every ``--check-stride``-th box of each case from both servers must be a 200
  ``image/png`` of the size asked, not blank, opaque with ``TRANSPARENT=FALSE``; the two
  servers' pixels are compared (printed) and MapServer's error body shown when it fails;
- throughput: ``wrk -t1`` (``--connections`` connections, ``--clients`` for the last case), a
  timeout of 60 s, every answer counted: each case on MapServer then mapsvc, case after case,
  the order of the two servers swapped every other pass; a rate is the 200 answers a second.

Goal: mapsvc >= 1.5 x MapServer's requests/s in every case (the median of the per-pass ratios:
the two servers of a pass ran back to back), and every answer of mapsvc a 200 with 8 clients
asking 1024x768 maps at once. About 3-4 minutes on 2 CPUs with the defaults.
"""

from __future__ import annotations

import argparse
import grp
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
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlencode

import httpx
import numpy as np
import rasterio
from rasterio.warp import transform, transform_bounds

from api.front import http_basics, nginx_main, worker_user
from shared.raster.paths import encode_id
from tests.bench._harness import (
    Deadline,
    Server,
    WrkCase,
    WrkResult,
    admin_key,
    auth_headers,
    free_port,
    goal,
    load_average,
    start,
    wait_http,
    wrk_latencies,
    wrk_output,
)
from tests.bench.bench_tiles import SCENE_REL, configure_layer, make_cog, start_mapsvc
from tests.layers import decode

ROOT = Path(__file__).resolve().parents[2]
#: the MapServer layer's name (the WMS ``LAYERS`` of its maps)
PEER_LAYER = "landsat"
#: what is installed when missing: the command, and Debian's package
TOOLS = {
    "mapserv": "mapserver-bin",
    "spawn-fcgi": "spawn-fcgi",
    "nginx": "nginx-light",
    "wrk": "wrk",
}
FASTCGI_PARAMS = Path("/etc/nginx/fastcgi_params")
#: the map pixels of the boxes (metres of EPSG:3857): the scene's are ~330 m there
RESOLUTIONS = (50.0, 150.0)
BOX_SEED = 24
#: wrk's timeout: longer than mapsvc's for a render (its turn included), so that a refusal is
#: an answer counted, not a connection given up on
WRK_TIMEOUT_S = 60


# --- tools ------------------------------------------------------------------------------------


def ensure_tools(deadline: Deadline) -> None:
    """The commands of :data:`TOOLS`, installed with apt-get when missing (as root)."""
    missing = [pkg for cmd, pkg in TOOLS.items() if shutil.which(cmd) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        raise SystemExit(
            f"needs {', '.join(missing)} (bash deploy/services.sh --test-tools, as root)"
        )
    print(f"installing {', '.join(missing)} ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
    ):
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=deadline.left(600)
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")


def mapserver_version() -> str:
    out = subprocess.run(["mapserv", "-v"], capture_output=True, text=True, check=False).stdout
    return out.split(" OUTPUT=")[0].strip() or "mapserv (version unknown)"


# --- the boxes --------------------------------------------------------------------------------


Box = tuple[float, float, float, float]


def data_boxes(cog: Path, size: tuple[int, int], count: int, seed: int) -> list[Box]:
    """``count`` boxes (EPSG:3857) of ``size`` pixels of 50-150 m, each inside the scene's data:
    a grid of 7 x 7 points over it all on pixels with data (a fixed random draw)."""
    with rasterio.open(cog) as ds:
        mask = ds.dataset_mask()
        inverse = ~ds.transform
        crs = ds.crs
        west, south, east, north = transform_bounds(crs, "EPSG:3857", *ds.bounds)
    rng = random.Random(seed)
    steps = np.linspace(0.0, 1.0, 7)
    boxes: list[Box] = []
    for _ in range(count * 2000):
        res = rng.uniform(*RESOLUTIONS)
        w, h = size[0] * res, size[1] * res
        if w >= east - west or h >= north - south:
            continue
        x0, y0 = rng.uniform(west, east - w), rng.uniform(south, north - h)
        xs = [x0 + sx * w for sx in steps for _ in steps]
        ys = [y0 + sy * h for _ in steps for sy in steps]
        px, py = transform("EPSG:3857", crs, xs, ys)
        cols, rows = inverse * (np.asarray(px), np.asarray(py))
        cols, rows = np.floor(cols).astype(int), np.floor(rows).astype(int)
        inside = (cols >= 0) & (rows >= 0) & (cols < mask.shape[1]) & (rows < mask.shape[0])
        if inside.all() and (mask[rows, cols] > 0).all():
            boxes.append((x0, y0, x0 + w, y0 + h))
            if len(boxes) == count:
                return boxes
    raise RuntimeError(f"found {len(boxes)} of {count} boxes of {size} inside the scene's data")


def getmap_query(layer: str, size: tuple[int, int], box: Box, transparent: bool) -> str:
    """The query of a WMS 1.3.0 GetMap of ``layer``: PNG, EPSG:3857."""
    pairs = [
        ("SERVICE", "WMS"),
        ("VERSION", "1.3.0"),
        ("REQUEST", "GetMap"),
        ("LAYERS", layer),
        ("STYLES", ""),
        ("FORMAT", "image/png"),
        ("WIDTH", str(size[0])),
        ("HEIGHT", str(size[1])),
        ("CRS", "EPSG:3857"),
        ("BBOX", ",".join(f"{v:.2f}" for v in box)),
        ("TRANSPARENT", "TRUE" if transparent else "FALSE"),
    ]
    return urlencode(pairs, quote_via=quote, safe="/:,")


# --- MapServer --------------------------------------------------------------------------------


def mapfile(cog: Path, extent: Box, base: str) -> str:
    """The mapfile of the COG as one WMS layer, drawn bilinearly, nodata 0 transparent."""
    x0, y0, x1, y1 = extent
    return f"""MAP
  NAME "bench"
  EXTENT {x0:.2f} {y0:.2f} {x1:.2f} {y1:.2f}
  SIZE 256 256
  MAXSIZE 4096
  UNITS METERS
  PROJECTION
    "init=epsg:3857"
  END
  OUTPUTFORMAT
    NAME "png"
    DRIVER AGG/PNG
    MIMETYPE "image/png"
    IMAGEMODE RGBA
    EXTENSION "png"
    TRANSPARENT ON
  END
  WEB
    METADATA
      "wms_title" "bench"
      "wms_onlineresource" "{base}/?"
      "wms_srs" "EPSG:3857"
      "wms_enable_request" "*"
    END
  END
  LAYER
    NAME "{PEER_LAYER}"
    TYPE RASTER
    STATUS ON
    DATA "{cog}"
    PROJECTION
      AUTO
    END
    PROCESSING "RESAMPLE=BILINEAR"
    PROCESSING "NODATA=0"
    METADATA
      "wms_title" "{PEER_LAYER}"
      "wms_srs" "EPSG:3857"
    END
  END
END
"""


_NGINX = """{main}
http {{
{basics}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            include {params};
            fastcgi_param MS_MAPFILE {mapfile};
            fastcgi_pass unix:{socket};
            # a 1024x768 PNG of MapServer's is ~1.7 MB: held in memory, not in a file
            fastcgi_buffer_size 64k;
            fastcgi_buffers 64 64k;
        }}
    }}
}}
"""


def stop_pids(pid_file: Path) -> None:
    """The FastCGI processes ``spawn-fcgi`` started (their ids in ``pid_file``; they are in
    sessions of their own) stopped: SIGTERM, then SIGKILL to those left after a second."""
    try:
        pids = [int(p) for p in pid_file.read_text().split()]
    except (OSError, ValueError):
        return
    ours = []
    for pid in pids:
        try:  # still the mapserv this run started (not an id given again since)
            if b"mapserv" in Path(f"/proc/{pid}/cmdline").read_bytes():
                ours.append(pid)
        except OSError:
            pass
    for sig, wait_s in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 0.0)):
        for pid in ours:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + wait_s
        while time.monotonic() < end and any(Path(f"/proc/{pid}").exists() for pid in ours):
            time.sleep(0.05)


def start_mapserver(
    stack: ExitStack,
    work: Path,
    cog: Path,
    n: int,
    logs: Path,
    client: httpx.Client,
    deadline: Deadline,
) -> tuple[Server, str, str]:
    """``n`` mapserv FastCGI processes behind nginx, once it answers; nginx, its base URL, and
    the mapfile's text."""
    folder = work / "mapserver"
    run = folder / "run"
    run.mkdir(parents=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with rasterio.open(cog) as ds:
        extent = transform_bounds(ds.crs, "EPSG:3857", *ds.bounds)
    map_path, config = folder / "bench.map", folder / "mapserver.conf"
    map_text = mapfile(cog, extent, base)
    map_path.write_text(map_text)
    # MapServer 8 reads a configuration file first; the maps it may open are this folder's
    config.write_text(
        f'CONFIG\n  ENV\n    MS_MAP_PATTERN "^{re.escape(str(folder))}/"\n  END\nEND\n'
    )
    socket_path, pid_file = run / "mapserv.sock", run / "mapserv.pid"
    # the system's GDAL and PROJ: not the data paths this process may have for its wheels
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PROJ_", "GDAL_"))}
    env["MAPSERVER_CONFIG_FILE"] = str(config)
    argv = ["spawn-fcgi", "-s", str(socket_path), "-M", "0666", "-F", str(n), "-P", str(pid_file)]
    user = worker_user()  # as root: the user nginx's workers run as (it reads the work dir)
    if user is not None:
        argv += ["-u", user.pw_name, "-g", grp.getgrgid(user.pw_gid).gr_name]
    stack.callback(stop_pids, pid_file)
    done = subprocess.run(
        [*argv, "--", shutil.which("mapserv") or "mapserv"],
        env=env,
        capture_output=True,
        text=True,
        timeout=deadline.left(30),
    )
    (logs / "spawn-fcgi.log").write_text(done.stdout + done.stderr)
    pids = pid_file.read_text().split() if pid_file.exists() else []
    if done.returncode != 0 or len(pids) != n:
        raise RuntimeError(f"spawn-fcgi started {len(pids)} of {n}:\n{done.stderr}")
    if not FASTCGI_PARAMS.exists():
        raise RuntimeError(f"no {FASTCGI_PARAMS} (Debian's nginx-common)")
    conf = run / "nginx.conf"
    conf.write_text(
        _NGINX.format(
            main=nginx_main(run, "nginx"),
            basics=http_basics(run),
            port=port,
            params=FASTCGI_PARAMS,
            mapfile=map_path,
            socket=socket_path,
        )
    )
    argv = ["nginx", "-c", str(conf), "-g", "daemon off;"]
    nginx = start(stack, "nginx (MapServer)", argv, logs / "nginx.log", env, ROOT)
    wait_http(client, f"{base}/?SERVICE=WMS&REQUEST=GetCapabilities", [nginx], deadline, 30)
    return nginx, base, map_text


# --- the cases --------------------------------------------------------------------------------


@dataclass
class Case:
    """One kind of map asked of both servers over the same boxes."""

    name: str
    size: tuple[int, int]
    transparent: bool
    connections: int
    boxes: list[Box]
    peer: WrkCase = field(default_factory=lambda: WrkCase("MapServer"))
    ours: WrkCase = field(default_factory=lambda: WrkCase("mapsvc"))
    #: the share of answers other than a 200, each pass
    peer_bad: list[float] = field(default_factory=list)
    ours_bad: list[float] = field(default_factory=list)
    #: mean bytes of a map, of the checked boxes
    peer_bytes: float = 0.0
    ours_bytes: float = 0.0
    pixels: str = ""

    def ratios(self) -> list[float]:
        return [
            o.rate / p.rate if p.rate else float("inf")
            for o, p in zip(self.ours.passes, self.peer.passes, strict=True)
        ]


def make_cases(cog: Path, boxes: int, connections: int, clients: int) -> list[Case]:
    small = data_boxes(cog, (256, 256), boxes, BOX_SEED)
    large = data_boxes(cog, (1024, 768), boxes, BOX_SEED + 1)
    cases = []
    for size, chosen in (((256, 256), small), ((1024, 768), large)):
        for transparent in (True, False):
            name = f"{size[0]}x{size[1]} TRANSPARENT={'TRUE' if transparent else 'FALSE'}"
            cases.append(Case(name, size, transparent, connections, chosen))
    cases.append(
        Case(f"1024x768 TRANSPARENT=FALSE, {clients} clients", (1024, 768), False, clients, large)
    )
    return cases


# --- checks -----------------------------------------------------------------------------------


def checked_map(
    client: httpx.Client, server: str, url: str, size: tuple[int, int], transparent: bool
) -> tuple[bytes, np.ndarray]:
    """A map, checked: a 200 PNG of ``size``, not blank, opaque unless ``transparent``."""
    r = client.get(url, timeout=60)
    kind = r.headers.get("content-type", "-").split(";")[0]
    if r.status_code != 200 or kind != "image/png":
        raise RuntimeError(f"{server}: {r.status_code} {kind} for {url}:\n{r.text[:2000]}")
    pixels = decode(r.content)
    bands, rows, cols = pixels.shape
    if (cols, rows) != size or bands not in (3, 4):
        raise RuntimeError(f"{server}: {bands} bands of {cols}x{rows}, not RGB(A) {size}: {url}")
    alpha = pixels[3] if bands == 4 else np.full((rows, cols), 255, np.uint8)
    if not transparent and alpha.min() < 255:
        raise RuntimeError(f"{server}: a map asked TRANSPARENT=FALSE is not opaque: {url}")
    opaque = alpha > 0
    rgb = pixels[:3, opaque]
    if opaque.mean() < 0.9 or rgb.size == 0 or float(rgb.std()) < 5:
        raise RuntimeError(
            f"{server}: a blank map ({100 * opaque.mean():.1f}% opaque, RGB std"
            f" {float(rgb.std()) if rgb.size else 0:.1f}): {url}"
        )
    return r.content, pixels


def compare(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> str:
    """How the two servers' maps differ: where each is opaque, and their RGB where both are."""
    same = total = 0
    diffs = []
    for a, b in pairs:
        alpha_a = a[3] > 0 if a.shape[0] == 4 else np.ones(a.shape[1:], bool)
        alpha_b = b[3] > 0 if b.shape[0] == 4 else np.ones(b.shape[1:], bool)
        same += int((alpha_a == alpha_b).sum())
        total += alpha_a.size
        both = alpha_a & alpha_b
        diffs.append(np.abs(a[:3].astype(np.int16) - b[:3])[:, both].ravel())
    d = np.concatenate(diffs)
    return (
        f"{len(pairs)} maps: opaque alike at {100 * same / total:.2f}% of pixels; RGB"
        f" |difference| where both drew: mean {d.mean():.2f}, 99th percentile"
        f" {np.percentile(d, 99):.0f}, max {d.max()}"
    )


# --- wrk, every answer counted ------------------------------------------------------------------


def wrk_counted(
    base: str,
    paths: Sequence[str],
    headers: dict[str, str],
    seconds: int,
    connections: int,
) -> tuple[WrkResult, float]:
    """``wrk -t1`` over ``paths`` in turn (the harness's script) with a timeout of
    :data:`WRK_TIMEOUT_S`: the rate of 200 answers, the latencies of all, and the share of
    answers other than a 200 (socket errors and timeouts counted as such)."""
    out = wrk_output(
        base,
        paths,
        headers=headers,
        seconds=seconds,
        connections=connections,
        threads=1,
        timeout_s=WRK_TIMEOUT_S,
    )
    found = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)\b", out)
    if found is None:
        raise RuntimeError(f"wrk at {base}: no count of requests:\n{out}")
    answered = int(found[1])
    elapsed_s = float(found[2]) * {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[found[3]]
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    failed = sum(int(v) for v in errors.groups()) if errors else 0
    bad = (int(non_2xx[1]) if non_2xx else 0) + failed
    share = bad / (answered + failed) if answered + failed else 1.0
    good = answered - (int(non_2xx[1]) if non_2xx else 0)
    if answered == 0:
        return WrkResult(0.0, float("nan"), float("nan")), share
    return WrkResult(good / elapsed_s, *wrk_latencies(out)), share


def measure(
    case: Case,
    server: str,
    base: str,
    paths: Sequence[str],
    headers: dict[str, str],
    seconds: int,
    label: str,
) -> None:
    result, share = wrk_counted(base, paths, headers, seconds, case.connections)
    (case.peer if server == "MapServer" else case.ours).passes.append(result)
    (case.peer_bad if server == "MapServer" else case.ours_bad).append(share)
    print(
        f"  {label} {case.name}, {server}: {result.rate:.1f} maps/s, p50 {result.p50_ms:.1f} ms,"
        f" p99 {result.p99_ms:.1f} ms, non-200 {100 * share:.1f}%",
        flush=True,
    )


# --- the report -------------------------------------------------------------------------------


def report(cases: Sequence[Case]) -> None:
    print(
        f"\n{'case':40} {'server':9} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'non-200':>8}"
        f" {'bytes/map':>10}  ratio (per pass)"
    )
    for case in cases:
        ratios = case.ratios()
        for server, wrk, bad, size in (
            ("MapServer", case.peer, case.peer_bad, case.peer_bytes),
            ("mapsvc", case.ours, case.ours_bad, case.ours_bytes),
        ):
            p50, p99 = wrk.latency()
            ratio = ""
            if server == "mapsvc":
                ratio = (
                    f"{statistics.median(ratios):.2f}x ({', '.join(f'{r:.2f}' for r in ratios)})"
                )
            print(
                f"{case.name if server == 'MapServer' else '':40} {server:9} {wrk.rate:8.1f}"
                f" {p50:8.1f} {p99:8.1f} {100 * max(bad):7.1f}% {size:10.0f}  {ratio}"
            )
    print("\npixels (the checked boxes):")
    for case in cases:
        if case.pixels:
            print(f"  {case.name}: {case.pixels}")


# --- the run ----------------------------------------------------------------------------------


def main() -> int:  # noqa: C901 - one run, step by step
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="N: render / mapserv processes")
    parser.add_argument("--connections", type=int, default=4, help="wrk's, in the cases")
    parser.add_argument("--clients", type=int, default=8, help="of the last case, at once")
    parser.add_argument("--passes", type=int, default=2, help="wrk passes per case and server")
    parser.add_argument("--seconds", type=int, default=8, help="seconds of one wrk pass")
    parser.add_argument("--boxes", type=int, default=50, help="boxes of each size, in turn")
    parser.add_argument("--check-stride", type=int, default=5, help="check every n-th box")
    parser.add_argument(
        "--max-large",
        type=int,
        default=None,
        help="MAPSVC_RENDER_MAX_LARGE of the API (default: the service's)",
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/6", help="flushed first")
    parser.add_argument("--timeout-s", type=float, default=900, help="bound of the whole run")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work dir")
    args = parser.parse_args()
    deadline = Deadline(args.timeout_s)
    began = time.monotonic()
    # a SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so the servers are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # progress as it goes
    n = args.workers
    ensure_tools(deadline)
    if args.max_large is not None:
        os.environ["MAPSVC_RENDER_MAX_LARGE"] = str(args.max_large)

    work = Path(tempfile.mkdtemp(prefix="mapsvc-bench-wms-"))
    work.chmod(0o755)  # mapserv and nginx's workers run as www-data: they must pass it
    logs = work / "logs"
    logs.mkdir()
    key = admin_key()  # mapsvc's; MapServer ignores the header
    with ExitStack() as stack, httpx.Client(headers=auth_headers(key)) as client:
        if args.keep:
            print(f"work dir (kept): {work}")
        else:
            stack.callback(shutil.rmtree, work, ignore_errors=True)
        cog, about = make_cog(work)
        print(f"scene: {about}")
        servers, api = start_mapsvc(stack, work, n, args.redis, 1, logs, client, deadline, key)
        config = configure_layer(client, api, deadline, "bilinear")
        layer = str(config["layer"])
        if layer != encode_id(SCENE_REL):
            raise RuntimeError(f"layer {layer!r} is not the id of {SCENE_REL}")
        servers[1].stop()  # the worker configured the layer: its processes leave the CPUs
        # the layer's Mapnik style (the only one of the work dir) draws it as MapServer does
        scalings = {
            m
            for xml in (work / "map" / "mapnik").rglob("*.xml")
            for m in re.findall(r'scaling="(\w+)"', xml.read_text())
        }
        if scalings != {"bilinear"}:
            raise RuntimeError(f"the layer's Mapnik scaling is {scalings or 'not found'}")
        api_server = servers[0]
        origin = api.removesuffix("/api-user")
        nginx, peer_base, map_text = start_mapserver(stack, work, cog, n, logs, client, deadline)
        print(
            f"mapsvc: API (one process, MAPSVC_RENDER_PROCESSES={n}, MAPSVC_RENDER_MAX_LARGE="
            f"{os.environ.get('MAPSVC_RENDER_MAX_LARGE', 'default')}), layer {layer}"
            f" (Mapnik scaling bilinear); {origin}/api-user/wms"
        )
        print(
            f"MapServer: {mapserver_version()}, {n} FastCGI processes (spawn-fcgi) behind nginx"
            f" {peer_base}/; mapfile: RESAMPLE=BILINEAR, NODATA=0, AGG/PNG RGBA"
        )
        if args.keep:
            print(f"mapfile:\n{map_text}")

        cases = make_cases(cog, args.boxes, args.connections, args.clients)
        headers = auth_headers(key)

        def ours(case: Case) -> list[str]:
            return [
                f"/api-user/wms?{getmap_query(layer, case.size, b, case.transparent)}"
                for b in case.boxes
            ]

        def peer(case: Case) -> list[str]:
            return [
                f"/?{getmap_query(PEER_LAYER, case.size, b, case.transparent)}" for b in case.boxes
            ]

        print(
            f"cases: {len(cases)}, {args.boxes} boxes of each size inside the scene's data (map"
            f" pixels {RESOLUTIONS[0]:g}-{RESOLUTIONS[1]:g} m), asked in turn; wrk -t1"
            f" -c{args.connections} (-c{args.clients} for the last) -d{args.seconds}s,"
            f" {args.passes} passes per case and server; N = {n}; {os.cpu_count()} CPUs"
        )
        print(f"checking every {args.check_stride}th box of each case on both servers ...")
        checked: dict[tuple[tuple[int, int], bool], Case] = {}
        for case in cases:
            seen = checked.get((case.size, case.transparent))
            if seen is not None:  # the same maps as a case checked already
                case.peer_bytes, case.ours_bytes = seen.peer_bytes, seen.ours_bytes
                continue
            checked[(case.size, case.transparent)] = case
            pairs, peer_sizes, our_sizes = [], [], []
            for mine_path, peer_path in list(zip(ours(case), peer(case), strict=True))[
                :: args.check_stride
            ]:
                deadline.left()
                theirs, peer_pixels = checked_map(
                    client, "MapServer", peer_base + peer_path, case.size, case.transparent
                )
                mine, our_pixels = checked_map(
                    client, "mapsvc", origin + mine_path, case.size, case.transparent
                )
                pairs.append((our_pixels, peer_pixels))
                peer_sizes.append(len(theirs))
                our_sizes.append(len(mine))
            case.peer_bytes, case.ours_bytes = (
                statistics.mean(peer_sizes),
                statistics.mean(our_sizes),
            )
            case.pixels = compare(pairs)
            print(
                f"  {case.name}: {len(pairs)} maps each a 200 PNG of the size asked, not blank;"
                f" bytes MapServer {case.peer_bytes:.0f}, mapsvc {case.ours_bytes:.0f}\n"
                f"    pixels: {case.pixels}"
            )

        # warm-up, untimed: every process of both servers has drawn maps of both sizes
        for case in (cases[0], cases[3]):
            wrk_counted(peer_base, peer(case), {}, 1, args.connections)
            wrk_counted(origin, ours(case), headers, 1, args.connections)

        print(f"load average (1, 5, 15 min) before measuring: {load_average()}")
        if os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1):
            print("WARNING: the machine is busy with other work: every figure will be skewed")
        print("throughput (maps/s: 200 answers a second) ...")
        for i in range(args.passes):
            label = f"pass {i + 1}/{args.passes}"
            for case in cases:
                runs = [
                    ("MapServer", peer_base, peer(case), {}),
                    ("mapsvc", origin, ours(case), headers),
                ]
                for server, base, paths, sent in runs if i % 2 == 0 else runs[::-1]:
                    deadline.left()
                    measure(case, server, base, paths, sent, args.seconds, label)
            api_server.check()
            nginx.check()

        report(cases)
        print("\ngoals (mapsvc / MapServer, medians of the per-pass ratios):")
        for case in cases:
            goal(f"WMS GetMap {case.name}", statistics.median(case.ratios()), 1.5, "x MapServer")
        concurrent = cases[-1]
        goal(
            f"WMS GetMap 1024x768, {args.clients} clients: mapsvc non-200",
            max(concurrent.ours_bad),
            0,
            "of answers",
            at_most=True,
        )
        print(
            f"  (MapServer's non-200 with {args.clients} clients: at most"
            f" {100 * max(concurrent.peer_bad):.1f}% of a pass's answers)"
        )
        print(f"load average (1, 5, 15 min) at the end: {load_average()}")
        print(f"the whole run: {time.monotonic() - began:.0f} s")
        return 0


if __name__ == "__main__":
    sys.exit(main())
