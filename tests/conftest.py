"""Real services for the suite: a throwaway PostGIS database, Redis, a Celery worker, uvicorn."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis
import uvicorn
from pydantic import SecretStr
from sqlalchemy import create_engine
from starlette.testclient import TestClient
from starlette.types import ASGIApp

from api.app import create_app
from shared.demo import DEMO_DATA, load_countries
from shared.settings import PROVIDER_DEFAULTS, Settings, env_values
from tests.checks import ADMIN_KEY, AUTH
from tests.providers import fakes
from tests.services import poll, tail

ROOT = Path(__file__).resolve().parents[1]
PG_SERVER = os.environ.get("MAPSVC_TEST_PG", "postgresql://postgres@127.0.0.1:5432")
REDIS_URL = os.environ.get("MAPSVC_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")
#: a second Redis db, for the test of `mapsvc up` (its worker must be the only one there)
UP_REDIS_URL = os.environ.get("MAPSVC_TEST_UP_REDIS_URL", "redis://127.0.0.1:6379/12")
TEST_DB = f"mapsvc_test_{os.getpid()}"


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """``@pytest.mark.anyio`` tests run on asyncio (the service's loop), a new loop each."""
    return "asyncio"


@pytest.fixture
def restored() -> Iterator[None]:
    """The root logger as it was (the handlers ``configure_logging`` replaces)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers, root.level = handlers, level


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def make_database(name: str, *, postgis: bool = False) -> str:
    """A new database ``name`` on the suite's server (dropped first if left over), empty or
    with PostGIS; its SQLAlchemy URL."""
    drop_database(name)
    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    if postgis:
        with psycopg.connect(f"{PG_SERVER}/{name}", autocommit=True) as conn:
            conn.execute("CREATE EXTENSION postgis")
    return f"postgresql+psycopg://{PG_SERVER.split('://', 1)[1]}/{name}"


def drop_database(name: str) -> None:
    """Drop database ``name``, if there is one, whoever is connected to it."""
    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """A throwaway database with PostGIS for the whole session."""
    yield make_database(TEST_DB, postgis=True)
    drop_database(TEST_DB)


@pytest.fixture(scope="session")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("work")


@pytest.fixture(scope="session")
def settings(database_url: str, work_dir: Path) -> Settings:
    redis.Redis.from_url(REDIS_URL).flushdb()
    return Settings(
        work_dir=work_dir,
        database_url=database_url,
        redis_url=REDIS_URL,
        job_wait_s=60,  # generous: a loaded machine must not turn answers into 202s
        sse_keepalive_s=1,
        diag_probe=True,  # the job tests run the pipeline probe
        check_answers=True,  # every JSON answer of every test is checked against the document
        job_watchdog_interval_s=2,  # the worker's beat checks for stalled jobs often
        allowed_hosts="testserver,127.0.0.1,localhost",  # TestClient's host, and live servers
        render_warm_up=False,  # many apps start and stop here: render processes on first use
        admin_api_key=ADMIN_KEY,  # the suite calls as an admin unless a test says otherwise
        # the suite is one caller making many calls: quotas are tested on their own
        rate_tiles_per_min=10**7,
        rate_data_per_min=10**7,
        rate_providers_per_min=10**7,
        rate_jobs_per_min=10**7,
        rate_documents_per_min=10**7,
        rate_auth_per_min=10**7,
        rate_admin_per_min=10**7,
        front_rate_per_s=0,  # nor the front's count of an address
        # many tests send wrong keys and tokens on purpose, all from 127.0.0.1
        rate_failed_auth_per_min=10**7,
        _env_file=None,  # type: ignore[call-arg]
    )


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that gives a subprocess the same settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSVC_")}
    for name, value in env_values(settings).items():
        if value is None:  # unset stays unset (e.g. MAPSVC_CONVERT_SERVER_ADDRESS)
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if isinstance(value, tuple | frozenset):
            value = ",".join(sorted(value) if isinstance(value, frozenset) else value)
        env[name] = str(value)
    return env


def with_providers(settings: Settings, **changes: dict[str, object]) -> Settings:
    """``settings`` with some providers' fields changed: ``nominatim={"url": …}``."""
    providers = settings.providers.model_copy(
        update={
            name: settings.providers.named(name).model_copy(update=fields)
            for name, fields in changes.items()
        }
    )
    return settings.model_copy(update={"providers": providers})


@pytest.fixture(scope="session")
def rdb(settings: Settings) -> redis.Redis:
    return redis.Redis.from_url(settings.redis_url, decode_responses=True)


@pytest.fixture(scope="session")
def worker(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[subprocess.Popen[bytes]]:
    """A real Celery worker process (two pool processes) on every queue."""
    with worker_process(settings, tmp_path_factory.mktemp("worker") / "worker.log") as proc:
        yield proc


# -- processes of the service (``mapsvc …``) ----------------------------------------------


def stop_process(
    proc: subprocess.Popen[bytes], timeout: float = 30, signum: int = signal.SIGTERM
) -> None:
    """Send ``signum`` to ``proc`` and wait for it; kill it if it has not exited in ``timeout``
    seconds (its exit status then says so: ``-SIGKILL``)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signum)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextmanager
def logged_process(
    argv: list[str],
    env: dict[str, str],
    log: Path,
    stop_timeout: float = 30,
    stop_signal: int = signal.SIGTERM,
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` run in the checkout with ``env``, its standard output and error written to
    ``log``; stopped at the end (``stop_process``)."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        stop_process(proc, stop_timeout, stop_signal)


def mapsvc_process(
    settings: Settings,
    *args: str,
    log: Path,
    stop_timeout: float = 30,
    stop_signal: int = signal.SIGTERM,
) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """``mapsvc *args`` (``python -m api.cli``) with ``settings`` as a ``logged_process``."""
    argv = [sys.executable, "-m", "api.cli", *args]
    return logged_process(argv, settings_env(settings), log, stop_timeout, stop_signal)


def run_mapsvc(
    settings: Settings,
    *args: str,
    stdin: str = "",
    timeout: float = 120,
    cwd: Path = ROOT,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``mapsvc *args`` with ``settings`` run to its end, its output captured as text; with
    ``check``, it must succeed."""
    done = subprocess.run(
        [sys.executable, "-m", "api.cli", *args],
        env=settings_env(settings),
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert not check or done.returncode == 0, done.stderr
    return done


def wait_for_output(
    proc: subprocess.Popen[bytes], log: Path, text: str, timeout: float, step: float = 0.5
) -> None:
    """Wait until ``text`` is in ``log``, the output of ``proc``; fail with the log's end when
    ``proc`` exits first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert proc.poll() is None, f"exited ({proc.returncode}):\n{tail(log, 3000)}"
        assert time.monotonic() < deadline, f"no {text!r} in {timeout} s:\n{tail(log, 3000)}"
        time.sleep(step)


@contextmanager
def serve_process(settings: Settings, log: Path, timeout: float = 60) -> Iterator[str]:
    """``mapsvc serve`` with ``settings`` (its output in ``log``), once ``/api-user/health``
    answers; its base URL. Stopped at the end."""
    base = f"http://127.0.0.1:{settings.port}"
    with mapsvc_process(settings, "serve", log=log) as proc:

        def answers() -> bool:
            assert proc.poll() is None, f"mapsvc serve exited:\n{tail(log, 3000)}"
            try:
                return httpx.get(f"{base}/api-user/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        poll(answers, timeout, "mapsvc serve answering", step=0.2)
        yield base


@contextmanager
def worker_process(
    settings: Settings, log: Path, concurrency: int = 2, timeout: float = 60
) -> Iterator[subprocess.Popen[bytes]]:
    """``mapsvc worker -c concurrency`` with ``settings`` (its output in ``log``), once the API's
    ``/ready`` answers 200 (it counts the worker); stopped at the end."""
    with mapsvc_process(settings, "worker", "-c", str(concurrency), log=log) as proc:
        with admin_client(create_app(settings)) as tc:
            deadline = time.monotonic() + timeout
            while tc.get("/api-user/ready").status_code != 200:
                assert proc.poll() is None, f"the worker exited:\n{tail(log, 3000)}"
                assert time.monotonic() < deadline, f"no worker ready:\n{tail(log, 3000)}"
                time.sleep(0.3)
        yield proc


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    """The API in-process (lifespan run), errors answered as a user would see them."""
    with admin_client(create_app(settings), raise_server_exceptions=False) as tc:
        yield tc


@contextmanager
def served_app(app: ASGIApp, ready_path: str) -> Iterator[str]:
    """``app`` on a real uvicorn server in a thread, once ``ready_path`` answers; its base URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(f"{base}{ready_path}", headers=AUTH).status_code == 200:
                break
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def served(settings: Settings) -> Iterator[str]:
    """The API with ``settings`` on a real uvicorn server in a thread; yields its base URL."""
    with served_app(create_app(settings), "/api-user/health") as base:
        yield base


@pytest.fixture(scope="session")
def live_server(settings: Settings) -> Iterator[str]:
    """A real uvicorn server in a thread, for what needs a socket (SSE)."""
    with served(settings) as base:
        yield base


@pytest.fixture(scope="session")
def raster_dir(settings: Settings) -> Path:
    """The demo rasters in the session's work dir, plus things that are not rasters."""
    root = settings.dirs.raster
    shutil.copytree(DEMO_DATA / "raster", root, dirs_exist_ok=True)
    (root / "single" / "notes.txt").write_text("not a raster")
    (root / "single" / "fake.tif").write_text("text pretending to be a TIFF")
    (root / "empty").mkdir(exist_ok=True)
    if not (root / "escape").exists():
        (root / "escape").symlink_to("/etc")
    return root


# -- vector tables and fake providers, for every test package -----------------------------

#: rows of test_points
POINTS = 300


def pg(database_url: str) -> str:
    return database_url.replace("+psycopg", "")


@pytest.fixture(scope="session")
def vector_tables(database_url: str) -> str:
    """Countries (the demo shapefile), points, lines, a view, a UTM table, a table without key."""
    engine = create_engine(database_url)
    load_countries(engine, DEMO_DATA)
    engine.dispose()
    with psycopg.connect(pg(database_url), autocommit=True) as conn:
        conn.execute(
            """
            DROP TABLE IF EXISTS test_points, test_lines, test_utm, test_nopk CASCADE;
            DROP VIEW IF EXISTS big_countries;
            CREATE TABLE test_points (id serial PRIMARY KEY, name text, kind text, value integer,
                                      geom geometry(Point, 4326));
            INSERT INTO test_points (name, kind, value, geom)
              SELECT 'point ' || i, CASE WHEN i % 3 = 0 THEN 'Shop' ELSE 'house' END, i,
                     ST_SetSRID(ST_Point(-10 + (i % 20), 40 + (i / 20)), 4326)
              FROM generate_series(1, %(n)s) AS i;
            CREATE INDEX ON test_points USING gist (geom);
            CREATE TABLE test_lines (id integer PRIMARY KEY, name text,
                                     geom geometry(LineString, 4326));
            INSERT INTO test_lines VALUES
              (1, 'equator part', ST_GeomFromText('LINESTRING(0 0, 10 0)', 4326)),
              (2, 'meridian part', ST_GeomFromText('LINESTRING(0 0, 0 10)', 4326));
            CREATE VIEW big_countries AS
              SELECT id, name, iso_a3, pop_est, geom FROM countries WHERE pop_est > 100000000;
            CREATE TABLE test_utm (id integer PRIMARY KEY, name text,
                                   geom geometry(Point, 32618));
            INSERT INTO test_utm VALUES (1, 'nassau', ST_Transform(
              ST_SetSRID(ST_Point(-77.35, 25.06), 4326), 32618));
            CREATE TABLE test_nopk (name text, geom geometry(Point, 4326));
            INSERT INTO test_nopk VALUES ('a', ST_SetSRID(ST_Point(1, 1), 4326));
            CREATE SCHEMA IF NOT EXISTS private;
            DROP TABLE IF EXISTS private.secret;
            CREATE TABLE private.secret (id integer PRIMARY KEY, geom geometry(Point, 4326));
            ANALYZE;
            """.replace("%(n)s", str(POINTS))
        )
    return database_url


@pytest.fixture(scope="session")
def fake_base() -> Iterator[str]:
    """The fake provider server (real HTTP on loopback) in a thread."""
    with served_app(fakes.fake_app(), "/nominatim/search?format=jsonv2&q=x") as base:
        yield base


@pytest.fixture(scope="session")
def psettings(settings: Settings, fake_base: str) -> Settings:
    """Every provider configured to its fake, fast timeouts, tiny backoff."""
    fast = settings.model_copy(
        update={
            "provider_connect_timeout_s": 0.5,
            "provider_timeout_s": 1.0,
            "provider_backoff_s": 0.01,
            "provider_rate_wait_s": 5.0,
        }
    )
    keys = {"here": "here-key", "mapbox": "mapbox-key", "owm": "owm-key"}
    return with_providers(
        fast,
        **{
            name: {"url": f"{fake_base}/{name}", "rate_per_s": 1000.0}
            | ({"api_key": SecretStr(keys[name])} if name in keys else {})
            for name in PROVIDER_DEFAULTS
        },
    )


def admin_client(app: ASGIApp, **kwargs: Any) -> TestClient:
    """A ``TestClient`` of ``app`` whose every request carries the admin key (``AUTH``).

    A request's own ``headers`` still win (e.g. an ``Authorization`` of its own).
    """
    # a copy: TestClient adds its user-agent to the dict it is given
    return TestClient(app, headers=dict(AUTH), **kwargs)


def app_client(settings: Settings) -> TestClient:
    """A client of the API with these settings, as the admin (use as a context manager)."""
    return admin_client(create_app(settings), raise_server_exceptions=False)
