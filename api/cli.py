"""The ``mapsvc`` command: run the API, a worker, Flower, or all at once; load demo data; export.

Servers are started by module name (``uvicorn api.app:create_app``, ``celery -A
workers.celery_app``), so this module imports neither the app nor Celery itself. It lives in
``api`` because it knows the API's layout (the ready route and mounts it prints).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import sqlalchemy.exc

from api import cli_auth, cli_cache, cli_seed, cli_watch
from api.front import front_argv, front_enabled, write_front_config
from api.mounts import USER_PREFIX, V1_PREFIX
from shared import metrics
from shared.auth.tokens import flower_basic_auth
from shared.logs import configure_logging
from shared.queues import QUEUES
from shared.settings import Settings
from shared.version import VERSION

__all__ = ["main", "serve_argv"]

_ALL_QUEUES = ",".join(sorted(set(QUEUES.values())))


def serve_argv(
    settings: Settings, reload: bool = False, *, behind_front: bool = False
) -> list[str]:
    """The command that serves the API with uvicorn: ``settings.api_workers`` processes, or one
    reloading process; behind the front on loopback at ``settings.backend_port``."""
    # behind the nginx front, the API listens on loopback only (the front takes the port)
    host, port = (
        ("127.0.0.1", settings.backend_port) if behind_front else (settings.host, settings.port)
    )
    argv = [sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory"]
    argv += ["--host", host, "--port", str(port), "--log-level", "info"]
    # asyncio's loop, not uvloop: under a flood of requests on open connections, uvloop
    # accepted new connections only every few seconds (measured with `make stress`)
    # and Nagle's algorithm off on every connection (api/serving.py)
    argv += ["--loop", "asyncio", "--http", "api.serving:NoDelayHttpToolsProtocol"]
    if reload:
        return [*argv, "--reload"]
    return [*argv, "--workers", str(settings.api_workers)]


def _worker_argv(settings: Settings, queues: str, concurrency: int, beat: bool = True) -> list[str]:
    argv = [sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker"]
    argv += ["-Q", queues, "-n", "mapsvc@%h", "--loglevel", settings.log_level]
    if beat:  # the embedded beat sends the job watchdog (shared/queues.py)
        argv.append("-B")
    return argv + (["-c", str(concurrency)] if concurrency else [])


def _flower_argv(settings: Settings) -> list[str]:
    argv = [sys.executable, "-m", "celery", "-A", "workers.celery_app", "flower"]
    return argv + [f"--port={settings.flower_port}", f"--address={settings.host}"]


def _flower_env(settings: Settings) -> dict[str, str]:
    """Flower's environment: its login and password (from the settings or the secrets file)
    in ``FLOWER_BASIC_AUTH``, which Flower reads, never on its command line (``ps`` shows
    every process's)."""
    return {**os.environ, "FLOWER_BASIC_AUTH": flower_basic_auth(settings)}


def _convert_argv(settings: Settings) -> list[str]:
    return [sys.executable, "-m", "api.cli", "convert-server", str(settings.convert.port)]


def _metrics_env(settings: Settings) -> dict[str, str]:
    """The environment of API and worker processes: their metrics go where ``/metrics`` reads.

    prometheus-client takes multiprocess mode from the environment when it is imported, so
    the folder is named before the process starts; files of processes gone are dropped first.
    """
    folder = metrics.prepare_dir(metrics.metrics_root(settings))
    return {**os.environ, metrics.ENV: str(folder.resolve())}


def _exec(argv: list[str], env: dict[str, str] | None = None) -> int:
    os.execve(argv[0], argv, os.environ if env is None else env)
    return 1  # pragma: no cover - execv does not return


def _render_tile(
    settings: Settings, style: str, zxy: tuple[str, str, str], lang: str | None, out: Path
) -> int:
    from shared.base.grid import parse_tile
    from shared.errors import MapsvcError
    from shared.params import parse_lang
    from shared.tiles.render import TileRenderer

    try:
        tile = parse_tile(*zxy)
        with TileRenderer(settings.dirs.mapnik) as renderer:
            rendered = renderer.render_tile(
                style, parse_lang(lang or settings.default_lang, settings.languages), tile
            )
    except MapsvcError as exc:
        print(f"render-tile: {exc.message}", file=sys.stderr)
        return 2
    out.write_bytes(rendered.data)
    print(f"{out}: {len(rendered.data)} bytes{' (empty)' if rendered.empty else ''}")
    return 0


class _Printed:
    """An export's progress lines, on standard error."""

    def line(self, text: str, *, progress: float | None = None) -> None:
        print(text, file=sys.stderr, flush=True)


def _export(settings: Settings, args: argparse.Namespace) -> int:
    import json
    import uuid

    from shared.errors import MapsvcError
    from shared.job_messages import Export
    from shared.params import parse_lang
    from shared.seeding.coverage_ask import AskedCoverage, coverage_in_process
    from shared.seeding.export import (
        export_folder,
        export_layer,
        export_name,
        is_raster_layer,
    )
    from shared.seeding.export_s3 import ExportBucket
    from shared.tiles.render import TileRenderer
    from shared.tiles.stores import tile_stores

    raster = is_raster_layer(settings.dirs.mapnik, args.layer)
    out: Path = args.out or Path(f"{args.layer}.{args.archive}")
    if args.s3:  # written as an export of the API, then uploaded under its name
        out = export_folder(settings.dirs.exports, args.layer) / export_name(
            str(uuid.uuid4()), args.archive
        )
    try:
        geojson = json.loads(args.geojson.read_text()) if args.geojson else None
    except (OSError, ValueError) as exc:
        print(f"export: --geojson: {exc}", file=sys.stderr)
        return 2
    asked = AskedCoverage(
        args.bbox, args.bbox_crs, geojson, args.coverage_layer, args.where, args.buffer
    )
    try:
        coverage = coverage_in_process(asked, settings)
        job = Export(
            args.layer,
            not raster,
            args.archive,
            args.tile_format,
            None if coverage is None else coverage.to_json(),
            args.minzoom,
            args.maxzoom,
            parse_lang(args.lang or settings.default_lang, settings.languages) if raster else "",
            buffer=args.buffer,
            s3=args.s3,
        )
        with TileRenderer(settings.dirs.mapnik) as renderer, tile_stores(settings) as stores:
            result = export_layer(
                settings,
                job,
                out.resolve(),
                _Printed(),
                renderer=renderer,
                store=stores.pick(False),
                bucket=ExportBucket(stores.s3) if args.s3 and stores.s3 else None,
            )
    except MapsvcError as exc:
        print(f"export: {exc.message}", file=sys.stderr)
        return 2
    where = f"s3://{result['s3']['bucket']}/{result['s3']['key']}" if args.s3 else out
    print(f"{where}: {result['tiles']} tiles, {result['bytes']} bytes")
    return 0


def _demo_data(settings: Settings, data_dir: Path | None, replace: bool) -> int:
    from sqlalchemy import create_engine
    from sqlalchemy.exc import OperationalError

    from shared.demo import DEMO_DATA, copy_rasters, load_countries
    from shared.errors import MapsvcError
    from shared.raster.store import raster_store

    data_dir = data_dir or settings.demo_data_dir or DEMO_DATA
    if not (data_dir / "raster").is_dir():
        print(f"no demo data at {data_dir}", file=sys.stderr)
        return 2
    settings.ensure_work_dir()
    store = raster_store(settings)  # the work dir's map/raster, or the bucket
    try:
        copied = copy_rasters(data_dir, store)
    except MapsvcError as exc:  # the bucket unreachable or refusing
        print(f"rasters: {exc.message}", file=sys.stderr)
        return 2
    finally:
        store.close()
    print(f"rasters: {len(copied)} copied into {store.describe()}")
    engine = create_engine(settings.database_url, connect_args={"connect_timeout": 3})
    try:
        print(f"countries: {load_countries(engine, data_dir, replace=replace)} rows in PostGIS")
    except OperationalError as exc:
        print(f"countries: PostgreSQL not reachable, skipped ({exc.orig})", file=sys.stderr)
    finally:
        engine.dispose()
    return 0


def _wait_ready(url: str, procs: Sequence[subprocess.Popen[bytes]], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            return False
        try:
            if httpx.get(url, timeout=3).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return False


def _credentials_hint(settings: Settings, base: str, key_file: Path | None) -> str:
    """How a newcomer calls the API: with the first admin key, or the configured one."""
    if key_file is not None:
        header = f'-H "Authorization: Bearer $(cat {key_file})"'
        return (
            f"  admin key in {key_file} (make more: mapsvc key create NAME --role reader)\n"
            f"  try      curl {header} {base}{USER_PREFIX}/gis-raster\n"
            f"  events   curl -N {header} {base}{USER_PREFIX}/events\n"
        )
    return "  credentials: MAPSVC_ADMIN_API_KEY, or keys made with `mapsvc key create`\n"


def _front_argv(settings: Settings) -> list[str]:
    backend = settings.front_backend or f"127.0.0.1:{settings.backend_port}"
    return front_argv(write_front_config(settings, backend))


def _up(settings: Settings) -> int:
    """Run API, worker, Flower, the Convert server and the follower of watched layers
    together until Ctrl-C (``make run``)."""
    # the API reaches the Convert server started here unless another address is configured
    convert_address = settings.convert.server_address or f"127.0.0.1:{settings.convert.port}"
    metrics_env = _metrics_env(settings)
    api_env = {**metrics_env, "MAPSVC_CONVERT_SERVER_ADDRESS": convert_address}
    front = front_enabled(settings)
    try:
        key_file = cli_auth.first_admin_key(settings)
    except sqlalchemy.exc.OperationalError as exc:
        print(f"PostgreSQL not reachable, no admin key made: {exc.orig}", file=sys.stderr)
        key_file = None
    procs = [
        subprocess.Popen(serve_argv(settings, behind_front=front), env=api_env),
        *([subprocess.Popen(_front_argv(settings))] if front else []),
        subprocess.Popen(
            _worker_argv(settings, _ALL_QUEUES, settings.jobs.worker_concurrency), env=metrics_env
        ),
        subprocess.Popen(_flower_argv(settings), env=_flower_env(settings)),
        subprocess.Popen(_convert_argv(settings)),
        subprocess.Popen(cli_watch.follower_argv(), env=metrics_env),
    ]
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    base = f"http://{settings.host}:{settings.port}"
    flower_login = flower_basic_auth(settings).partition(":")[0]
    if _wait_ready(f"{base}{USER_PREFIX}/ready", procs, timeout_s=90):
        print(
            f"\nmapsvc is up:\n  API      {base}{USER_PREFIX}/  (also {base}{V1_PREFIX}/)"
            f"{'  behind nginx: cached tiles from disk' if front else ''}\n"
            f"  viewer   {base}/viewer  (API docs {base}/docs, front door {base}/)\n"
            f"  ready    {base}{USER_PREFIX}/ready\n{_credentials_hint(settings, base, key_file)}"
            f"  Flower   http://{settings.host}:{settings.flower_port}/  (login {flower_login},"
            " password in the secrets file or MAPSVC_FLOWER_BASIC_AUTH)\n"
            f"  convert  {convert_address} (gRPC; POST {base}{USER_PREFIX}/pdf-merge)\n"
            "  follower the edits of watched layers expire their tiles (mapsvc watch <layer>)\n"
            "Ctrl-C stops all.\n",
            flush=True,
        )
    else:
        print(f"mapsvc did not become ready: see {base}{USER_PREFIX}/ready", file=sys.stderr)
        stop = True
    while not stop and all(p.poll() is None for p in procs):
        time.sleep(0.5)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
    return 0 if stop else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mapsvc`` command."""
    parser = argparse.ArgumentParser(prog="mapsvc", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"mapsvc {VERSION}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP API (uvicorn)")
    serve.add_argument("--reload", action="store_true", help="restart on code changes")
    worker = sub.add_parser("worker", help="run a Celery worker")
    worker.add_argument("-Q", "--queues", default=_ALL_QUEUES, help=f"default: {_ALL_QUEUES}")
    worker.add_argument("-c", "--concurrency", type=int, default=None, help="worker processes")
    worker.add_argument(
        "--no-beat", action="store_true", help="without the embedded job watchdog schedule"
    )
    sub.add_parser("flower", help="run Flower, the Celery monitor")
    sub.add_parser(
        "front", help="run the nginx front (cached tiles from disk; the API at MAPSVC_BACKEND_PORT)"
    )
    convert = sub.add_parser("convert-server", help="run the Convert gRPC server (spec 4.17)")
    convert.add_argument("port", nargs="?", type=int, default=None, help="default: 4003")
    sub.add_parser(
        "up", help="run API, worker, Flower, Convert and the follower together (make run)"
    )
    render = sub.add_parser("render-tile", help="render one tile of a style to a PNG file")
    render.add_argument("style", help="the style (layer id)")
    render.add_argument("z", help="zoom")
    render.add_argument("x", help="column")
    render.add_argument("y", help="row")
    render.add_argument("--lang", default=None, help="label language (default: the setting)")
    render.add_argument("--out", type=Path, default=Path("tile.png"), help="default: tile.png")
    export = sub.add_parser(
        "export", help="write a layer's tiles into an MBTiles or PMTiles file (as the job does)"
    )
    export.add_argument("layer", help="the layer: a raster layer's id, or a vector layer's")
    export.add_argument("--archive", choices=("mbtiles", "pmtiles"), default="mbtiles")
    export.add_argument("--minzoom", type=int, default=0, help="first zoom (default: 0)")
    export.add_argument(
        "--maxzoom", type=int, default=None, help="end zoom, excluded (default: the layer's + 1)"
    )
    coverage = export.add_mutually_exclusive_group()
    coverage.add_argument("--bbox", default=None, help="minx,miny,maxx,maxy (in --bbox-crs)")
    coverage.add_argument(
        "--geojson", type=Path, default=None, help="a file: a GeoJSON (Multi)Polygon or Feature"
    )
    coverage.add_argument(
        "--coverage-layer", default=None, help="a vector layer whose polygons are the coverage"
    )
    export.add_argument("--bbox-crs", default="EPSG:4326", help="CRS of --bbox (EPSG:4326)")
    export.add_argument("--where", default=None, help="CQL2-text filter of --coverage-layer")
    export.add_argument("--buffer", type=int, default=0, help="pixels around each tile (0)")
    export.add_argument(
        "--tile-format", default=None, help="png (default), webp, jpg; mvt for a vector layer"
    )
    export.add_argument("--lang", default=None, help="label language (default: the setting)")
    output = export.add_mutually_exclusive_group()
    output.add_argument(
        "--out", type=Path, default=None, help="the file (default: <layer>.<archive> here)"
    )
    output.add_argument(
        "--s3",
        action="store_true",
        help="write it to the bucket (MAPSVC_S3_*) under exports/<layer>/, as isS3=1 does",
    )
    demo = sub.add_parser("demo-data", help="copy demo rasters, load countries into PostGIS")
    demo.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="default: MAPSVC_DEMO_DATA_DIR or deploy/demo-data",
    )
    demo.add_argument("--replace", action="store_true", help="reload the countries table")
    cli_auth.add_commands(sub)
    cli_seed.add_command(sub)
    cli_cache.add_commands(sub)
    cli_watch.add_commands(sub)
    args = parser.parse_args(argv)

    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    done = cli_auth.run(args, settings)
    if done is not None:
        return done
    if args.command == "serve":
        return _exec(serve_argv(settings, args.reload), _metrics_env(settings))
    if args.command == "worker":
        concurrency = (
            settings.jobs.worker_concurrency if args.concurrency is None else args.concurrency
        )
        return _exec(
            _worker_argv(settings, args.queues, concurrency, not args.no_beat),
            _metrics_env(settings),
        )
    if args.command == "flower":
        return _exec(_flower_argv(settings), _flower_env(settings))
    if args.command == "front":
        return _exec(_front_argv(settings))
    if args.command == "convert-server":
        from shared.convert.server import serve as serve_convert

        return serve_convert(settings, args.port)
    if args.command == "render-tile":
        return _render_tile(settings, args.style, (args.z, args.x, args.y), args.lang, args.out)
    if args.command == "up":
        return _up(settings)
    if args.command == "seed":
        return cli_seed.run(args, settings)
    if args.command in cli_cache.COMMANDS:
        return cli_cache.run(args, settings)
    if args.command in cli_watch.COMMANDS:
        return cli_watch.run(args, settings)
    if args.command == "export":
        return _export(settings, args)
    return _demo_data(settings, args.data_dir, args.replace)


if __name__ == "__main__":
    sys.exit(main())
