"""The ``mapsvc`` command: demo data, and ``up`` (what ``make run`` runs) as a user would."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psycopg
import pytest
import redis
from pydantic import SecretStr

from shared.demo import DEMO_DATA
from shared.settings import Settings
from tests.checks import AUTH, PYPROJECT_VERSION
from tests.conftest import UP_REDIS_URL, free_port, mapsvc_process, run_mapsvc, wait_for_output
from tests.convert.pdfs import make_pdf

#: the login and password Flower is started with (``MAPSVC_FLOWER_BASIC_AUTH``)
FLOWER_LOGIN = ("flower", "test-flower-password")


def test_demo_data_copies_rasters_and_loads_countries(settings: Settings, tmp_path: Path) -> None:
    mine = settings.model_copy(update={"work_dir": tmp_path / "work"})
    first = run_mapsvc(mine, "demo-data")
    assert first.returncode == 0, first.stderr
    raster = tmp_path / "work" / "map" / "raster"
    sources = sorted(
        p.relative_to(DEMO_DATA / "raster") for p in (DEMO_DATA / "raster").rglob("*.tif")
    )
    assert sorted(p.relative_to(raster) for p in raster.rglob("*.tif")) == sources
    assert (raster / "single" / "RGB.byte.tif").read_bytes() == (
        DEMO_DATA / "raster" / "single" / "RGB.byte.tif"
    ).read_bytes()
    assert f"rasters: {len(sources)} copied" in first.stdout
    assert "countries: 177 rows in PostGIS" in first.stdout
    dsn = mine.database_url.replace("+psycopg", "")
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT iso_a3, continent, GeometryType(geom), ST_SRID(geom),"
            " ST_Contains(geom, ST_SetSRID(ST_Point(13.4, 52.52), 4326))"
            " FROM countries WHERE name = 'Germany'"
        ).fetchone()
    assert row == ("DEU", "Europe", "MULTIPOLYGON", 4326, True)
    again = run_mapsvc(mine, "demo-data")
    assert again.returncode == 0
    assert "rasters: 0 copied" in again.stdout
    assert "177 rows" in again.stdout


def test_demo_data_without_database_still_copies(settings: Settings, tmp_path: Path) -> None:
    mine = settings.model_copy(
        update={
            "work_dir": tmp_path / "work",
            "database_url": "postgresql+psycopg://postgres@127.0.0.1:1/none",
        }
    )
    result = run_mapsvc(mine, "demo-data")
    assert result.returncode == 0
    assert "PostgreSQL not reachable, skipped" in result.stderr
    assert (tmp_path / "work" / "map" / "raster" / "single" / "shade.tif").is_file()


def test_demo_data_reads_the_folder_it_is_given(settings: Settings, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "raster" / "mine").mkdir(parents=True)
    shutil.copyfile(
        DEMO_DATA / "raster" / "single" / "shade.tif", data / "raster" / "mine" / "a.tif"
    )
    shutil.copytree(DEMO_DATA / "vector", data / "vector")
    mine = settings.model_copy(update={"work_dir": tmp_path / "work", "demo_data_dir": data})
    result = run_mapsvc(mine, "demo-data")
    assert result.returncode == 0, result.stderr
    raster = tmp_path / "work" / "map" / "raster"
    assert [p.relative_to(raster) for p in raster.rglob("*.tif")] == [Path("mine", "a.tif")]
    # --data-dir wins over the setting
    missing = run_mapsvc(mine, "demo-data", "--data-dir", str(tmp_path / "none"))
    assert missing.returncode == 2
    assert f"no demo data at {tmp_path / 'none'}" in missing.stderr


def test_a_command_does_not_print_alembic_s_notes(settings: Settings, tmp_path: Path) -> None:
    mine = settings.model_copy(update={"work_dir": tmp_path / "work"})
    result = run_mapsvc(mine, "migrate")  # checks the auth tables, as every auth command does
    assert result.returncode == 0, result.stderr
    assert result.stdout == "auth tables are up to date\n"
    assert result.stderr == ""


def test_up_starts_api_worker_and_flower(settings: Settings, tmp_path: Path) -> None:
    # a Redis db of its own, so that /ready counts only the worker that `up` started
    mine = settings.model_copy(
        update={
            "work_dir": tmp_path / "work",
            "port": free_port(),
            "backend_port": free_port(),
            "flower_port": free_port(),
            "convert_port": free_port(),
            "redis_url": UP_REDIS_URL,
            # Flower asks for a login: a known one rather than one made in the secrets file
            "flower_basic_auth": SecretStr(":".join(FLOWER_LOGIN)),
        }
    )
    redis.Redis.from_url(mine.redis_url).flushdb()
    log = tmp_path / "up.log"
    with mapsvc_process(mine, "up", log=log, stop_timeout=60, stop_signal=signal.SIGINT) as proc:
        wait_for_output(proc, log, "mapsvc is up", 120)
        base = f"http://127.0.0.1:{mine.port}"
        assert f"{base}/api-user/ready" in log.read_text()
        # the viewer's URL; its page and MapLibre come through the front (the build: make web)
        assert f"viewer   {base}/viewer" in log.read_text()
        assert '<div id="map"' in httpx.get(f"{base}/viewer", timeout=10).text
        assert httpx.get(f"{base}/web/maplibre-gl.mjs", timeout=10).status_code == 200
        ready = httpx.get(f"{base}/api-user/ready", headers=AUTH, timeout=10).json()
        assert ready["status"] == "ready"
        assert ready["checks"]["workers"]["count"] == 1
        if shutil.which("nginx"):  # make run's nginx front takes the port, the API is behind it
            assert "behind nginx" in log.read_text()
            assert httpx.get(f"{base}/api-user/health").headers["server"] == "nginx"
        probe = httpx.post(
            f"{base}/api-user/diag/probe?steps=2&delay_ms=10", headers=AUTH, timeout=30
        )
        assert probe.status_code == 200
        assert probe.json()["steps"] == 2
        flower = httpx.get(f"http://127.0.0.1:{mine.flower_port}/", auth=FLOWER_LOGIN, timeout=10)
        assert flower.status_code == 200
        assert "Flower" in flower.text
        # the Convert server started too, and the API reaches it
        assert f"convert  127.0.0.1:{mine.convert.port}" in log.read_text()
        merged = httpx.post(
            f"{base}/api-user/pdf-merge",
            files=[("files", ("a.pdf", make_pdf([(100, 200, "a")]), "application/pdf"))] * 2,
            headers=AUTH,
            timeout=30,
        )
        assert merged.status_code == 200, merged.text
        assert merged.headers["x-page-count"] == "2"
    assert proc.returncode == 0  # it stopped on SIGINT, and cleanly
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{mine.port}/api-user/health", headers=AUTH, timeout=2)


def test_help_lists_the_commands() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "api.cli", "--help"], capture_output=True, text=True, check=True
    )
    for command in ("serve", "worker", "flower", "up", "demo-data", "convert-server"):
        assert command in result.stdout


def test_version_is_pyprojects() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "api.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == f"mapsvc {PYPROJECT_VERSION}"
