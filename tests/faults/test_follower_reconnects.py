"""PostgreSQL restarted under the follower of watched layers (issue 35): it connects again by
itself, listens again, and an edit made after the restart still reaches the cached tiles."""

from __future__ import annotations

import subprocess
import sys
import time

import psycopg
import pytest
import redis

from shared.seeding.follow import POSITION_KEY
from shared.settings import Settings
from shared.vector.watch import newest_change
from tests.conftest import settings_env
from tests.faults.conftest import Api
from tests.services import PostgresCluster

pytestmark = [pytest.mark.server]

LAYER = "public.moved"
TILE = "/api-user/vtile/public.moved/4/8/7.pbf"  # holds lon 10, lat 0..20


def newest(db: str) -> int:
    with psycopg.connect(db, autocommit=True) as conn:
        return newest_change(conn)


def settled(db: str, rdb: redis.Redis, timeout_s: float) -> None:
    """Wait until the follower expired every change logged."""
    wanted, deadline = newest(db), time.monotonic() + timeout_s
    while int(rdb.get(POSITION_KEY) or 0) < wanted:
        assert time.monotonic() < deadline, "the follower did not catch up"
        time.sleep(0.05)


def test_the_follower_connects_again_after_postgres_restarts(
    fault_api: Api, fault_pg: PostgresCluster, fault_settings: Settings, fault_rdb: redis.Redis
) -> None:
    db = fault_pg.url("mapsvc")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "DROP TABLE IF EXISTS moved; CREATE TABLE moved (id serial PRIMARY KEY, name text,"
            " geom geometry(Point, 4326));"
            " INSERT INTO moved (name, geom) VALUES ('a', ST_Point(10, 5, 4326))"
        )
    api = fault_api.client
    assert api.put(f"/api-user/watches/{LAYER}").status_code == 200
    follower = subprocess.Popen(
        [sys.executable, "-m", "api.cli", "follow"], env=settings_env(fault_settings)
    )
    try:
        first = api.get(TILE)
        assert first.status_code == 200, first.text
        assert api.get(TILE).headers["x-cache"] == "HIT"
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("UPDATE moved SET geom = ST_Point(10, 10, 4326)")
        settled(db, fault_rdb, 10)
        moved = api.get(TILE)
        assert moved.headers["x-cache"] == "MISS"
        assert moved.headers["etag"] != first.headers["etag"]

        fault_pg.stop()
        time.sleep(1.0)  # the follower's connection is gone; it tries again, and waits
        fault_pg.start()
        assert follower.poll() is None  # it did not die of it
        assert api.get(TILE).status_code == 200  # (kept, or drawn again by a second expiry)
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("UPDATE moved SET geom = ST_Point(10, 15, 4326)")
        settled(db, fault_rdb, 30)  # its pause doubles up to 10 s between tries
        again = api.get(TILE)
        assert again.headers["x-cache"] == "MISS"
        assert again.headers["etag"] != moved.headers["etag"]
    finally:
        follower.terminate()
        follower.wait(timeout=20)
        api.delete(f"/api-user/watches/{LAYER}")
