"""``/ready`` for anonymous callers (issue 21, class 5): ready or not ready only, from a check at
most a second or two old, so a flood of calls costs about one Celery ping a second; operators
get a check of their own with each dependency's detail."""

from __future__ import annotations

import asyncio
import subprocess
import time
from typing import Any

import httpx
import pytest
from celery.app.control import Control
from starlette.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.checks import AUTH, assert_error
from tests.conftest import served

READY = "/api-user/ready"


def reader_key(client: TestClient) -> str:
    made = client.post("/api-user/api-keys", json={"name": "r", "role": "reader"}, headers=AUTH)
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


@pytest.mark.worker
def test_only_operators_see_the_checks(settings: Settings, worker: subprocess.Popen[bytes]) -> None:
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        for prefix in ("/api-user", "/api/v1"):
            r = client.get(f"{prefix}/ready")
            assert r.status_code == 200, r.text
            assert r.json() == {"status": "ready"}
        reader = {"Authorization": f"Bearer {reader_key(client)}"}
        assert client.get(READY, headers=reader).json() == {"status": "ready"}
        detailed = client.get(READY, headers=AUTH).json()
        assert detailed["status"] == "ready"
        assert detailed["checks"]["workers"]["names"]
        assert detailed["checks"]["database"]["postgis"].startswith("3.")


def test_not_ready_names_nothing_to_anonymous_callers(settings: Settings) -> None:
    broken = settings.model_copy(
        update={"database_url": "postgresql+psycopg://postgres@127.0.0.1:5432/no_such_db_mapsvc"}
    )
    with TestClient(create_app(broken), raise_server_exceptions=False) as client:
        r = client.get(READY)
        assert r.status_code == 503
        error = assert_error(r.json(), "not-ready")
        assert error["detail"] == {}
        for hidden in ("no_such_db_mapsvc", "database", "redis", "workers", "mapsvc@"):
            assert hidden not in r.text
        assert r.headers["x-request-id"]
        # an operator is told what fails
        operator = client.get(READY, headers=AUTH)
        assert operator.status_code == 503
        checks = assert_error(operator.json(), "not-ready")["detail"]["checks"]
        assert "no_such_db_mapsvc" in checks["database"]["error"]


def test_a_flood_of_anonymous_calls_pings_about_once_a_second(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    pings: list[float] = []
    ping = Control.ping

    def counted(self: Control, *args: Any, **kwargs: Any) -> Any:
        pings.append(time.monotonic())
        return ping(self, *args, **kwargs)

    monkeypatch.setattr(Control, "ping", counted)

    async def flood(base: str) -> tuple[float, list[httpx.Response]]:
        answers: list[httpx.Response] = []
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits) as client:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 3:
                answers += await asyncio.gather(*(client.get(READY) for _ in range(25)))
            return time.monotonic() - t0, answers

    with served(settings) as base:
        pings.clear()  # none but the flood's
        took, answers = asyncio.run(flood(base))
    assert len(answers) >= 50
    assert {r.status_code for r in answers} <= {200, 503}
    for r in answers:  # ready or not ready, never a detail
        if r.status_code == 200:
            assert r.json() == {"status": "ready"}
        else:
            assert assert_error(r.json(), "not-ready")["detail"] == {}
    # a check a second at most (each takes up to the 1 s ping), and one at the start
    assert 1 <= len(pings) <= took + 2, (len(pings), took)
