"""Health, readiness, the error shape and the two mounts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from starlette.requests import Request
from starlette.routing import Route
from starlette.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.checks import HEALTHY, PYPROJECT_VERSION, assert_error
from tests.conftest import admin_client


def test_health(client: TestClient) -> None:
    r = client.get("/api-user/health")
    assert r.status_code == 200
    assert r.json() == HEALTHY
    assert len(r.headers["x-request-id"]) == 32


def test_the_version_is_pyprojects_in_health_and_openapi(client: TestClient) -> None:
    assert client.get("/api-user/health").json()["version"] == PYPROJECT_VERSION
    assert client.get("/api-user/openapi.json").json()["info"]["version"] == PYPROJECT_VERSION
    changelog = (Path(__file__).resolve().parents[2] / "CHANGELOG.md").read_text()
    assert f"## [{PYPROJECT_VERSION}]" in changelog  # each version says what it changed


def test_request_id_is_echoed(client: TestClient) -> None:
    r = client.get("/api/v1/health", headers={"X-Request-ID": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"


@pytest.mark.worker
def test_ready_with_worker(client: TestClient, worker: subprocess.Popen[bytes]) -> None:
    for prefix in ("/api-user", "/api/v1"):
        r = client.get(f"{prefix}/ready")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["status"] == "ready"
        checks = body["checks"]
        assert checks["redis"]["ok"] is True
        assert checks["database"]["postgis"].startswith("3.")
        assert checks["workers"]["count"] >= 1
        assert all(name.startswith("mapsvc@") for name in checks["workers"]["names"])


def test_ready_503_when_database_is_missing(settings: Settings) -> None:
    broken = settings.model_copy(
        update={"database_url": "postgresql+psycopg://postgres@127.0.0.1:5432/no_such_db_mapsvc"}
    )
    with admin_client(create_app(broken), raise_server_exceptions=False) as tc:
        r = tc.get("/api-user/ready")
    assert r.status_code == 503
    error = assert_error(r.json(), "not-ready")
    checks = error["detail"]["checks"]
    assert checks["database"]["ok"] is False
    assert "no_such_db_mapsvc" in checks["database"]["error"]
    assert checks["redis"]["ok"] is True
    assert "database" in error["message"]


def test_ready_503_when_redis_is_down(settings: Settings) -> None:
    broken = settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})
    with admin_client(create_app(broken), raise_server_exceptions=False) as tc:
        r = tc.get("/api-user/ready")
    assert r.status_code == 503
    checks = assert_error(r.json(), "not-ready")["detail"]["checks"]
    assert checks["redis"]["ok"] is False
    assert checks["workers"]["ok"] is False


def test_unknown_route_is_json_404(client: TestClient) -> None:
    r = client.get("/api-user/no-such-thing")
    assert r.status_code == 404
    assert "/api-user/no-such-thing" in assert_error(r.json(), "not-found")["message"]
    assert client.get("/nowhere").json()["error"]["code"] == "not-found"


def test_wrong_method_is_json_405(client: TestClient) -> None:
    r = client.post("/api-user/health")
    assert r.status_code == 405
    assert_error(r.json(), "method-not-allowed")
    assert "GET" in r.headers["allow"]


def test_unhandled_error_is_json_500_without_traceback(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(request: Request) -> None:
        raise RuntimeError("secret internal detail")

    app = create_app(settings)
    app.router.routes.append(Route("/boom", boom))
    with admin_client(app, raise_server_exceptions=False) as tc:
        r = tc.get("/boom", headers={"X-Request-ID": "req-42"})
    assert r.status_code == 500
    error = assert_error(r.json(), "internal")
    assert error["detail"] == {"request_id": "req-42"}
    assert "secret" not in r.text
    assert "Traceback" not in r.text
    assert any("req-42" in rec.getMessage() and rec.exc_info for rec in caplog.records)


def test_work_dir_layout_is_created(tmp_path, settings: Settings) -> None:
    create_app(settings.model_copy(update={"work_dir": tmp_path / "w"}))
    for sub in ("map/raster", "map/rtile", "map/mapnik"):
        assert (tmp_path / "w" / sub).is_dir()
