"""PostgreSQL stopped: what needs it answers 503 within the service's own longest wait, raster
tiles keep coming (cached and rendered), and everything answers again once it is back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine

from shared.auth.keys import create_key
from shared.settings import Settings
from tests.checks import assert_error
from tests.faults.conftest import PARCEL, STATEMENT_TIMEOUT_MS, Api
from tests.faults.harness import assert_png
from tests.layers import tile_url
from tests.services import PostgresCluster, poll

pytestmark = [pytest.mark.server]

#: how much longer than the service's own longest wait (a statement, a pooled connection) an
#: answer may take while PostgreSQL is down
SLACK_S = 2.0


@pytest.fixture
def api_keys(fault_api: Api, fault_settings: Settings) -> Iterator[tuple[str, str]]:
    """Two reader keys: one used before the fault, one first used while PostgreSQL is down
    (a key's look-up is kept in Redis for 30 s, so only a key not looked up yet needs it)."""
    engine = create_engine(fault_settings.database_url)
    try:
        yield (
            create_key(engine, "faults-a", "reader")[1],
            create_key(engine, "faults-b", "reader")[1],
        )
    finally:
        engine.dispose()


def get(client: httpx.Client, path: str, key: str | None = None) -> tuple[httpx.Response, float]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    t0 = time.monotonic()
    r = client.get(path, headers=headers)
    return r, time.monotonic() - t0


def database_check(client: httpx.Client) -> dict[str, Any]:
    """``/ready``'s check of the database (no worker runs here: ``/ready`` itself is 503)."""
    body = client.get("/api-user/ready").json()
    checks = body["checks"] if "checks" in body else body["error"]["detail"]["checks"]
    check: dict[str, Any] = checks["database"]
    return check


def test_postgres_stopped(
    fault_api: Api,
    fault_pg: PostgresCluster,
    fault_settings: Settings,
    rgb_layer: str,
    api_keys: tuple[str, str],
) -> None:
    api = fault_api.client
    # a statement past its timeout, or no pooled connection in time: 503 (then the slack)
    bound_s = max(STATEMENT_TIMEOUT_MS / 1000, fault_settings.db_pool_timeout_s) + SLACK_S
    old_key, new_key = api_keys
    cached = tile_url(rgb_layer, 8, 72, 110)
    uncached = tile_url(rgb_layer, 10, 289, 441)
    first = api.get(cached)
    assert first.status_code == 200, first.text
    # answered afresh each time (nocache: neither the catalogue in memory nor Redis answers)
    needs_postgres = [
        "/api-user/gis-datasource/public.countries?nocache=1",
        "/api-user/geojson/public.countries?limit=3&nocache=1",
        "/api-user/vtile/public.countries/2/2/1.pbf?nocache=1",
        f"/api-user/dzk?cad_num={PARCEL}",
    ]
    for path in needs_postgres:
        assert api.get(path).status_code == 200, path
    assert get(api, cached, old_key)[0].status_code == 200
    fault_pg.stop()
    try:
        for path, key in [*((p, None) for p in needs_postgres), (cached, new_key)]:
            r, took = get(api, path, key)
            assert r.status_code == 503, (path, r.status_code, r.text)
            error = assert_error(r.json(), "unavailable")
            assert error["detail"]["service"] == "PostgreSQL", (path, error)
            assert int(r.headers["retry-after"]) >= 1, path
            assert took < bound_s, (path, took)
        t0 = time.monotonic()
        assert database_check(api)["ok"] is False
        assert time.monotonic() - t0 < bound_s
        # raster tiles need no database: the cached one comes from the cache, the other renders
        r, took = get(api, cached)
        assert (r.status_code, r.headers["x-cache"]) == (200, "HIT")
        assert r.content == first.content
        r, took = get(api, uncached)
        assert (r.status_code, r.headers["x-cache"]) == (200, "MISS"), r.text
        assert "x-tile-empty" not in r.headers  # rendered from the raster
        assert_png(r.content, "tile rendered while PostgreSQL is down")
        # a key looked up before the fault is kept in Redis a while: still known
        assert get(api, cached, old_key)[0].status_code == 200
    finally:
        fault_pg.start()
    # the same API process answers again, without a restart
    poll(lambda: database_check(api)["ok"], 30, "/ready's database check passing again")
    for path in needs_postgres:
        poll(lambda path=path: api.get(path).status_code == 200, 30, path)
    assert get(api, cached, new_key)[0].status_code == 200
    assert fault_api.process.alive()
