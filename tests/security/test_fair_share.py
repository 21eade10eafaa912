"""A fair share for every caller (issue 33, section 1): documents built once, not per request on
the event loop, and a budget on every route, anonymous callers' counted per address."""

from __future__ import annotations

import gc
import secrets
import statistics
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from starlette.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.checks import AUTH, assert_error
from tests.conftest import pg, served

OPENAPI = "/api-user/openapi.json"


def test_the_openapi_document_is_built_once_and_sent_with_an_etag(settings: Settings) -> None:
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        first, again = client.get(OPENAPI), client.get(OPENAPI)
        assert first.status_code == again.status_code == 200
        assert first.content == again.content
        assert first.json()["openapi"].startswith("3.1")
        etag = first.headers["etag"]
        assert etag == again.headers["etag"]
        assert etag.startswith('"')
        unchanged = client.get(OPENAPI, headers={"If-None-Match": etag})
        assert unchanged.status_code == 304
        assert unchanged.content == b""
        # each mount its own document: its server is the mount
        v1 = client.get("/api/v1/openapi.json")
        assert v1.json()["servers"][0]["url"].endswith("/api/v1")
        assert first.json()["servers"][0]["url"].endswith("/api-user")
        assert v1.headers["etag"] != etag


def test_a_flood_of_documents_does_not_stall_other_callers(settings: Settings) -> None:
    """12 connections asking for the OpenAPI document as fast as they can (``wrk``): another
    caller's requests keep answering in milliseconds (each document was ~70 ms of the event
    loop's CPU: they waited seconds). The server runs as in production (no answer checks)."""
    with served(settings.model_copy(update={"check_answers": False})) as base:
        with httpx.Client(base_url=base, timeout=30) as victim:
            idle = [_timed(victim, "/api-user/health") for _ in range(20)]
            flood = subprocess.Popen(
                ["wrk", "-t2", "-c12", "-d6s", "--latency", base + OPENAPI],
                stdout=subprocess.PIPE,
                text=True,
            )
            # the server's pauses are measured, not this process's: no collection of the suite's
            # heap in the middle of a timed request
            gc.collect()
            gc.disable()
            try:
                time.sleep(1.0)  # the flood is on
                busy = [_timed(victim, "/api-user/health") for _ in range(40)]
            finally:
                gc.enable()
                out, _ = flood.communicate(timeout=30)
    assert max(busy) < 0.5, (statistics.median(idle), sorted(busy)[-5:])
    assert statistics.median(busy) < 0.1, (statistics.median(idle), statistics.median(busy))
    requests = int(out.split(" requests in ")[0].split()[-1])
    assert requests > 200, out  # the flood did flood


def _timed(client: httpx.Client, path: str) -> float:
    started = time.perf_counter()
    assert client.get(path).status_code == 200
    return time.perf_counter() - started


@pytest.mark.parametrize("path", ["/api-user/openapi.json", "/api-user/health", "/api/v1/health"])
def test_anonymous_callers_have_a_budget_per_address(settings: Settings, path: str) -> None:
    """Open routes too: past the documents budget (3 a minute here) an address gets ``429``
    with ``Retry-After``; another address still gets its answers."""
    tight = settings.model_copy(
        update={
            "auth": settings.auth.model_copy(
                update={"rate_documents_per_min": 3, "rate_admin_per_min": 3}
            )
        }
    )
    with (  # one app each (an app's clients are on the loop of its first test client)
        TestClient(create_app(tight), client=(f"192.0.2.{secrets.randbelow(250)}", 1)) as one,
        TestClient(create_app(tight), client=(f"198.51.100.{secrets.randbelow(250)}", 1)) as other,
    ):
        codes = [one.get(path).status_code for _ in range(3)]
        refused = one.get(path)
        assert refused.status_code == 429, (codes, dict(refused.headers))
        assert_error(refused.json(), "rate-limited")
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.headers["ratelimit-remaining"] == "0"
        assert other.get(path).status_code == codes[0]


@pytest.fixture
def slow_layer(vector_tables: str) -> Iterator[str]:
    """A layer whose every query takes two seconds (a view that sleeps a second per row)."""
    with psycopg.connect(pg(vector_tables), autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE VIEW test_slow AS"
            " SELECT id, name, geom, (SELECT pg_sleep(1))::text AS nap FROM test_lines"
        )
    yield "public.test_slow"
    with psycopg.connect(pg(vector_tables), autocommit=True) as conn:
        conn.execute("DROP VIEW IF EXISTS test_slow")


def test_one_caller_cannot_take_every_database_connection(
    settings: Settings, slow_layer: str
) -> None:
    """One caller asks for a slow layer 8 times at once, on a pool of 3 connections: 2 run (its
    share), the others wait a second and get ``429`` with ``Retry-After``; another caller's
    query gets the third connection at once (before: it waited for the pool, seconds)."""
    shared = settings.model_copy(
        update={"db_pool_size": 3, "db_max_overflow": 0, "db_statements_per_caller": 2}
    )
    with served(shared) as base, httpx.Client(base_url=base, timeout=30) as admin:
        hog, other = (_reader_key(admin) for _ in range(2))
        slow = f"/api-user/geojson/{slow_layer}?nocache=1"
        lines = "/api-user/geojson/public.test_lines?nocache=1"
        assert admin.get(lines, headers=_bearer(other)).status_code == 200  # (the catalogue read)

        def ask(_: int) -> httpx.Response:
            return httpx.get(base + slow, headers=_bearer(hog), timeout=30)

        with ThreadPoolExecutor(8) as pool:
            flood = pool.map(ask, range(8))
            time.sleep(0.5)  # the hog's queries are running
            started = time.perf_counter()
            theirs = admin.get(lines, headers=_bearer(other))
            waited = time.perf_counter() - started
            answers = list(flood)
    assert theirs.status_code == 200, theirs.text
    assert len(theirs.json()["features"]) >= 2  # (other tests add lines)
    assert waited < 1.0, (waited, sorted(a.status_code for a in answers))  # not behind the hog
    codes = sorted(a.status_code for a in answers)
    assert codes.count(200) >= 2, codes
    refused = [a for a in answers if a.status_code == 429]
    assert refused, codes
    for answer in refused:
        assert_error(answer.json(), "rate-limited")
        assert int(answer.headers["retry-after"]) >= 1
    assert all(a.status_code in (200, 429) for a in answers), codes


def _reader_key(admin: httpx.Client) -> str:
    made = admin.post("/api-user/api-keys", json={"name": "share", "role": "reader"}, headers=AUTH)
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
