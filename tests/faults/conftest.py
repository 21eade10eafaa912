"""The fault tests' own services: Redis (AOF), a PostgreSQL cluster, the API as a process, and
Celery workers each test starts; the tests stop, kill and break them (tests/faults/harness.py)."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis
from sqlalchemy import create_engine

from shared.demo import DEMO_DATA, load_countries
from shared.settings import Settings
from tests.checks import ADMIN_KEY, AUTH
from tests.conftest import ROOT, free_port, settings_env
from tests.faults.harness import ServiceProcess, api_answers
from tests.layers import RGB, configure
from tests.services import PostgresCluster, RedisServer

#: the statement timeout of the API's queries
STATEMENT_TIMEOUT_MS = 2000
#: the cadastral number of the one parcel of the parcels table
PARCEL = "3222486200:03:001:0001"
#: a job silent this long is ended as failed (by the API reading it, or a worker's watchdog)
STALL_S = 15.0


@dataclass
class Api:
    """The API as a process of its own, and a client of it (as the admin)."""

    base: str
    process: ServiceProcess
    client: httpx.Client

    def job(self, job_id: str) -> dict[str, Any]:
        """The job's descriptor."""
        r = self.client.get(f"/api-user/jobs/{job_id}")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def wait_job(self, job_id: str, timeout: float) -> dict[str, Any]:
        """The job's descriptor once it has ended; fails after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job["state"] in ("succeeded", "failed", "cancelled"):
                return job
            assert time.monotonic() < deadline, f"job still {job['state']} after {timeout} s"
            time.sleep(0.2)


@pytest.fixture(scope="package")
def fault_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server of its own, with AOF (``appendfsync everysec``)."""
    server = RedisServer(tmp_path_factory.mktemp("fault-redis"))
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="package")
def fault_pg() -> Iterator[PostgresCluster]:
    """A PostgreSQL cluster of its own with a database ``mapsvc`` (PostGIS, countries,
    parcels)."""
    cluster = PostgresCluster()
    try:
        cluster.init()
        cluster.start()
        with psycopg.connect(cluster.url(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE mapsvc")
        with psycopg.connect(cluster.url("mapsvc"), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION postgis")
            conn.execute(
                """CREATE TABLE parcels (
                    cadnum text PRIMARY KEY, category text, purpose_code text, purpose text,
                    use text, area numeric, unit_area text, ownershipcode text, ownership text,
                    address text, geom geometry(MultiPolygon, 4326))"""
            )
            conn.execute(
                """INSERT INTO parcels VALUES (%s, 'Agricultural land', '01.01',
                    '01.01 For commercial farming', 'Arable land', 1.5, 'ha', '100', 'Private',
                    'Kyiv oblast, Bucha', ST_Multi(ST_MakeEnvelope(30.0, 50.0, 30.01, 50.01, 4326)))
                """,
                (PARCEL,),
            )
        engine = create_engine(cluster.url("mapsvc").replace("postgresql:", "postgresql+psycopg:"))
        load_countries(engine, DEMO_DATA)
        engine.dispose()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="package")
def fault_settings(
    fault_redis: RedisServer, fault_pg: PostgresCluster, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """The settings of every process of these tests: their own services, a work dir of their
    own with the Landsat scene."""
    work = tmp_path_factory.mktemp("fault-work")
    settings = Settings(
        work_dir=work,
        database_url=fault_pg.url("mapsvc").replace("postgresql:", "postgresql+psycopg:"),
        redis_url=fault_redis.url(0),
        job_wait_s=60,
        job_stall_s=STALL_S,
        job_watchdog_interval_s=2,
        sse_keepalive_s=1,
        diag_probe=True,
        allowed_hosts="127.0.0.1,localhost",
        render_warm_up=False,
        admin_api_key=ADMIN_KEY,
        vector_statement_timeout_ms=STATEMENT_TIMEOUT_MS,
        log_format="text",
        rate_tiles_per_min=10**7,
        rate_data_per_min=10**7,
        rate_providers_per_min=10**7,
        rate_jobs_per_min=10**7,
        _env_file=None,  # type: ignore[call-arg]
    )
    settings.ensure_work_dir()
    (settings.dirs.raster / "single").mkdir(parents=True)
    shutil.copyfile(DEMO_DATA / "raster" / RGB, settings.dirs.raster / RGB)
    return settings


@pytest.fixture(scope="package")
def fault_rdb(fault_settings: Settings) -> redis.Redis:
    """A client of the tests' Redis (``decode_responses``)."""
    return redis.Redis.from_url(fault_settings.redis_url, decode_responses=True)


@pytest.fixture(scope="package")
def fault_api(fault_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """The API (uvicorn) as a process of its own, never restarted by a test."""
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--loop", "asyncio"]
    log = tmp_path_factory.mktemp("fault-api") / "api.log"
    process = ServiceProcess("API", argv, settings_env(fault_settings), log, ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        process.wait_for(api_answers(base, "/api-user/health"), 60, "/health answering")
        with httpx.Client(base_url=base, headers=AUTH, timeout=30) as client:
            yield Api(base, process, client)
    finally:
        process.stop()


@pytest.fixture(scope="package")
def rgb_layer(fault_settings: Settings, fault_rdb: redis.Redis) -> str:
    """The Landsat scene, configured: its layer id."""
    return configure(fault_settings, fault_rdb, RGB)


@pytest.fixture
def scene(fault_settings: Settings, fault_rdb: redis.Redis, request: pytest.FixtureRequest) -> str:
    """A layer of the test's own (a copy of the Landsat scene): no tile of it is cached."""
    folder = fault_settings.dirs.raster / "pretile"
    folder.mkdir(exist_ok=True)
    name = f"{request.node.name[:40]}.tif"
    shutil.copyfile(DEMO_DATA / "raster" / RGB, folder / name)
    return configure(fault_settings, fault_rdb, f"pretile/{name}")


@pytest.fixture
def start_worker(
    fault_settings: Settings, fault_api: Api, fault_rdb: redis.Redis, tmp_path: Path
) -> Iterator[Callable[..., ServiceProcess]]:
    """Start a Celery worker (two pool processes, the embedded beat) once the Redis db is
    emptied of what earlier tests left; each is stopped when the test ends."""
    fault_rdb.flushdb()
    started: list[ServiceProcess] = []

    def start(**env: str) -> ServiceProcess:
        """A worker; ``env``: settings of its own (``MAPSVC_…`` variables)."""
        n = len(started) + 1
        argv = [sys.executable, "-m", "api.cli", "worker", "-c", "2"]
        log = tmp_path / f"worker-{n}.log"
        worker = ServiceProcess(f"worker {n}", argv, settings_env(fault_settings) | env, log, ROOT)
        started.append(worker)
        worker.wait_for(api_answers(fault_api.base, "/api-user/ready"), 60, "/ready answering")
        return worker

    yield start
    for worker in started:
        worker.stop()
