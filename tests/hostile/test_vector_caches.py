"""Vector answers and caches under hostile requests: junk parameters, a forged Host, cache
growth, a client that reads slowly, an exhausted database pool."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import psycopg
import pytest
import redis
from starlette.testclient import TestClient

from api.app import create_app
from shared.cache import ENTRY_OVERHEAD, ByteBudget, cached_json
from shared.settings import Settings
from tests.checks import ADMIN_KEY, AUTH, assert_error
from tests.conftest import admin_client, pg, served
from tests.providers import fakes

URL = "/api-user/geojson"
BIG_ROWS = 40_000  # about 20 MB of GeoJSON: far more than the socket buffers hold
CAP_S = 4.0
SLOW_APP = "mapsvc-hostile-slow"
IDLE = "idle in transaction"


def cache_keys(rdb: redis.Redis, kind: str) -> set[str]:
    return set(rdb.scan_iter(f"mapsvc:vector:{kind}:*", count=1000))


@pytest.fixture(scope="module")
def vclient(settings: Settings, vector_tables: str) -> Iterator[TestClient]:
    with admin_client(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def test_junk_parameters_make_no_cache_entries(vclient: TestClient, rdb: redis.Redis) -> None:
    query = "props=name,value&extent=-10,40,0,45&limit=7"
    first = vclient.get(f"{URL}/public.test_points?{query}")
    assert first.status_code == 200, first.text
    tile = "/api-user/vtile/public.test_points/2/1/1.pbf?props=name"
    assert vclient.get(tile).status_code == 200
    before = (cache_keys(rdb, "geojson"), cache_keys(rdb, "mvt"))
    junk = [
        f"{query}&junk={uuid.uuid4().hex}",
        f"junk={uuid.uuid4().hex}&{query}&x{uuid.uuid4().hex[:6]}=1",
    ]
    for _ in range(5):
        for spelling in junk:  # refused before any read: a parameter no route defines
            r = vclient.get(f"{URL}/public.test_points?{spelling}")
            assert r.status_code == 400
            assert r.json()["error"]["detail"]["parameter"].startswith(("junk", "x"))
        t = vclient.get(f"{tile}&junk={uuid.uuid4().hex}")
        assert t.status_code == 400
        # the same query spelt otherwise
        r = vclient.get(
            f"{URL}/public.test_points?props=name, value&extent=-10.0,40,0,45.0&limit=7"
        )
        assert r.status_code == 200
        assert r.headers["x-cache"] == "HIT"
        assert r.json() == first.json()
    assert (cache_keys(rdb, "geojson"), cache_keys(rdb, "mvt")) == before
    # the links name the normalised query only
    hrefs = {link["rel"]: link["href"] for link in first.json()["links"]}
    assert hrefs["self"] == (
        "/api-user/geojson/public.test_points?props=name,value"
        "&extent=-10.0,40.0,0.0,45.0&limit=7&offset=0"
    )
    assert hrefs["next"].endswith("&limit=7&offset=7")


def test_a_forged_host_reaches_no_link_and_no_cached_answer(
    settings: Settings,
    vector_tables: str,
    rdb: redis.Redis,
) -> None:
    evil = {"Host": "evil.example"}
    query = f"{URL}/public.test_lines?props=name&limit=1"
    # with the Host checked (the default), a forged one is refused and caches nothing
    with admin_client(create_app(settings), raise_server_exceptions=False) as checked:
        before = cache_keys(rdb, "geojson")
        refused = checked.get(query, headers=evil)
        assert refused.status_code == 400
        assert cache_keys(rdb, "geojson") == before
    # with any Host accepted, links are still relative, and so is what is cached
    anyhost = settings.model_copy(update={"allowed_hosts": "*"})
    with admin_client(create_app(anyhost), raise_server_exceptions=False) as client:
        forged = client.get(query, headers=evil)
        assert (forged.status_code, forged.headers["x-cache"]) == (200, "MISS")
        assert "evil.example" not in forged.text
        hrefs = [link["href"] for link in forged.json()["links"]]
        assert hrefs
        assert all(h.startswith("/api-user/geojson/public.test_lines?") for h in hrefs)
        normal = client.get(query)
        assert (normal.status_code, normal.headers["x-cache"]) == (200, "HIT")
        assert "evil.example" not in normal.text
        assert normal.json() == forged.json()
        # TileJSON must hold absolute URLs: the request's (checked) host, never cached
        tj = client.get("/api-user/gis-datasource/public.test_lines")
        assert tj.json()["tiles"] == [
            "http://testserver/api-user/vtile/public.test_lines/{z}/{x}/{y}.pbf"
        ]
    for key in cache_keys(rdb, "geojson"):
        assert b"evil.example" not in (rdb.get(key) or "").encode()
    # with a public URL, every link is under it whatever the Host says
    public = anyhost.model_copy(update={"public_url": "https://maps.example.org/"})
    with admin_client(create_app(public), raise_server_exceptions=False) as client:
        forged = client.get(query, headers=evil)
        assert forged.status_code == 200
        hrefs = [link["href"] for link in forged.json()["links"]]
        assert all(
            h.startswith("https://maps.example.org/api-user/geojson/public.test_lines?")
            for h in hrefs
        )
        tj = client.get("/api/v1/gis-datasource/public.test_lines", headers=evil).json()
        assert tj["tiles"] == [
            "https://maps.example.org/api/v1/vtile/public.test_lines/{z}/{x}/{y}.pbf"
        ]


def test_the_vector_cache_keeps_to_its_byte_budget(
    settings: Settings,
    vector_tables: str,
    rdb: redis.Redis,
) -> None:
    budget = 150_000
    # keys of the broker and the job store, without TTL: what an evicting Redis drops first
    rdb.rpush("hostile:queue", "message 1", "message 2")
    rdb.hset("mapsvc:job:hostile-record", mapping={"state": "running"})
    # (keys with a TTL, such as an earlier test's cached API key, may lapse meanwhile by
    # themselves: not the cache's doing)
    others = {
        k
        for k in rdb.scan_iter(count=1000)
        if not k.startswith("mapsvc:vector:") and rdb.ttl(k) == -1
    }
    books = ByteBudget("vector", budget).books
    others -= set(books)
    small = settings.model_copy(update={"vector_cache_max_bytes": budget})
    with admin_client(create_app(small), raise_server_exceptions=False) as client:
        for limit in range(40, 300, 8):  # 33 answers of 6 to 45 kB
            r = client.get(f"{URL}/public.test_points?limit={limit}&filter=value>0")
            assert (r.status_code, r.headers["x-cache"]) == (200, "MISS")
        used = int(rdb.get(books[2]) or 0)
        assert 0 < used <= budget
        kept = [k for k in rdb.zrange(books[0], 0, -1) if rdb.exists(k)]
        stored = sum(int(rdb.strlen(k)) + len(k) + ENTRY_OVERHEAD for k in kept)
        assert stored == used
        # the newest answer is kept, the oldest made room for it
        last = client.get(f"{URL}/public.test_points?limit=296&filter=value>0")
        assert last.headers["x-cache"] == "HIT"
        first = client.get(f"{URL}/public.test_points?limit=40&filter=value>0")
        assert first.headers["x-cache"] == "MISS"
        assert int(rdb.get(books[2]) or 0) <= budget
        # an answer larger than the whole budget is served, not stored
        whole = client.get(f"{URL}/public.countries?props=name")
        assert whole.status_code == 200
        assert len(whole.content) > budget
        assert client.get(f"{URL}/public.countries?props=name").headers["x-cache"] == "MISS"
    after = {k for k in rdb.scan_iter(count=1000) if not k.startswith("mapsvc:vector:")}
    assert others <= after
    assert rdb.lrange("hostile:queue", 0, -1) == ["message 1", "message 2"]
    assert rdb.hgetall("mapsvc:job:hostile-record") == {"state": "running"}
    rdb.delete("hostile:queue", "mapsvc:job:hostile-record")


def test_the_results_cache_keeps_to_its_byte_budget(rdb: redis.Redis) -> None:
    budget = ByteBudget("results", 20_000)
    rdb.delete(*budget.books)
    values = [
        cached_json(
            rdb,
            "hostile",
            i,
            lambda i=i: {"n": i, "pad": "x" * 900},
            ttl_s=60,
            max_bytes=budget.max_bytes,
        )
        for i in range(100)
    ]
    assert [v["n"] for v in values] == list(range(100))
    assert 0 < budget.used_bytes(rdb) <= budget.max_bytes
    assert 10 <= rdb.zcard(budget.books[0]) <= 20
    assert all(rdb.ttl(key) > 0 for key in budget.books)  # the books go with their entries
    calls: list[int] = []
    hit = cached_json(rdb, "hostile", 99, lambda: calls.append(1), ttl_s=60, max_bytes=20_000)
    assert hit["n"] == 99
    assert not calls
    huge = cached_json(rdb, "hostile", "huge", lambda: "y" * 30_000, ttl_s=60, max_bytes=20_000)
    assert len(huge) == 30_000
    assert budget.used_bytes(rdb) <= budget.max_bytes


def test_provider_answers_keep_to_their_byte_budget(
    psettings: Settings,
    rdb: redis.Redis,
) -> None:
    budget = ByteBudget("provider", 6000)
    rdb.delete(*budget.books)
    fakes.MODE.clear()
    fakes.CALLS.clear()
    small = psettings.model_copy(update={"provider_cache_max_bytes": budget.max_bytes})
    with admin_client(create_app(small), raise_server_exceptions=False) as client:
        for i in range(30):
            r = client.get("/api-user/geocode", params={"q": f"place {i}"})
            assert r.status_code == 200, r.text
        assert 0 < budget.used_bytes(rdb) <= budget.max_bytes
        kept = [k for k in rdb.zrange(budget.books[0], 0, -1) if rdb.exists(k)]
        assert 0 < len(kept) < 30
        calls = len(fakes.CALLS["nominatim"])
        assert client.get("/api-user/geocode", params={"q": "place 29"}).status_code == 200
        assert len(fakes.CALLS["nominatim"]) == calls  # the newest answer is still cached
        assert client.get("/api-user/geocode", params={"q": "place 0"}).status_code == 200
        assert len(fakes.CALLS["nominatim"]) == calls + 1  # the oldest made room


@pytest.fixture(scope="module")
def slow_server(settings: Settings, vector_tables: str) -> Iterator[str]:
    """A live API with one pooled connection, a short GeoJSON cap, and a large layer."""
    with psycopg.connect(pg(vector_tables), autocommit=True) as conn:
        conn.execute(
            f"""
            CREATE SCHEMA IF NOT EXISTS hostile;
            DROP TABLE IF EXISTS hostile.big;
            CREATE TABLE hostile.big (id integer PRIMARY KEY, pad text,
                                      geom geometry(Point, 4326));
            INSERT INTO hostile.big
              SELECT i, repeat(md5(i::text), 12),
                     ST_SetSRID(ST_Point(i % 360 - 180, i % 170 - 85), 4326)
              FROM generate_series(1, {BIG_ROWS}) AS i;
            ANALYZE hostile.big;
            """
        )
    slow = settings.model_copy(
        update={
            "database_url": f"{vector_tables}?application_name={SLOW_APP}",
            "vector_schemas": "public,hostile",
            "geojson_max_s": CAP_S,
            "geojson_buffer_bytes": 0,  # no read-ahead: the stream holds its connection
            "db_pool_size": 1,
            "db_max_overflow": 0,
            "db_pool_timeout_s": 0.5,
        }
    )
    with served(slow) as base:
        yield base


def transactions(database_url: str, state: str = "%") -> int:
    """Open transactions of the slow server's connections (``state``: a LIKE pattern)."""
    with psycopg.connect(pg(database_url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND xact_start IS NOT NULL AND state LIKE %s",
            (SLOW_APP, state),
        ).fetchone()
    return int(row[0]) if row else 0


@contextmanager
def slow_reader(base: str) -> Iterator[socket.socket]:
    """A GET of the large layer by a client that reads its head and then stops reading."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.sendall(
        f"GET {URL}/hostile.big?nocache=1 HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {ADMIN_KEY}\r\n\r\n".encode()
    )
    head = sock.recv(1024)
    assert head.startswith(b"HTTP/1.1 200"), head
    try:
        yield sock
    finally:
        sock.close()


def wait_for(check: object, timeout_s: float) -> float:
    start = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - start < timeout_s, "timed out"
        time.sleep(0.1)
    return time.monotonic() - start


def test_a_slow_geojson_reader_is_cut_at_the_cap_and_releases_its_connection(
    slow_server: str,
    vector_tables: str,
) -> None:
    started = time.monotonic()
    with slow_reader(slow_server) as sock:
        # the stream holds its transaction while the client does not read...
        wait_for(lambda: transactions(vector_tables, IDLE) == 1, CAP_S - 1)
        # ...until the cap: then the connection goes back to the pool
        wait_for(lambda: transactions(vector_tables) == 0, CAP_S + 5)
        assert time.monotonic() - started >= CAP_S - 0.5
        sock.settimeout(10)
        received = 0
        while chunk := sock.recv(65536):  # what was in flight, then the end: cut
            received += len(chunk)
    assert received < BIG_ROWS * 400
    # the one pooled connection serves the next request at once
    t0 = time.monotonic()
    r = httpx.get(f"{slow_server}{URL}/public.test_lines?nocache=1", headers=AUTH, timeout=10)
    assert r.status_code == 200
    assert json.loads(r.content)["numberReturned"] >= 2
    assert time.monotonic() - t0 < 2


def test_an_exhausted_database_pool_is_a_quick_503(
    slow_server: str,
    vector_tables: str,
) -> None:
    with slow_reader(slow_server):
        wait_for(lambda: transactions(vector_tables, IDLE) == 1, CAP_S - 1)
        t0 = time.monotonic()
        r = httpx.get(f"{slow_server}{URL}/public.test_lines?nocache=1", headers=AUTH, timeout=10)
        elapsed = time.monotonic() - t0
        assert r.status_code == 503
        assert_error(r.json(), "unavailable")
        assert elapsed < 2.5
        # other endpoints answer meanwhile
        assert (
            httpx.get(f"{slow_server}/api-user/health", headers=AUTH, timeout=5).status_code == 200
        )
    wait_for(lambda: transactions(vector_tables) == 0, CAP_S + 5)
    r = httpx.get(f"{slow_server}{URL}/public.test_lines?nocache=1", headers=AUTH, timeout=10)
    assert r.status_code == 200


def test_a_slow_reader_of_a_page_that_fits_the_read_ahead_holds_no_connection(
    settings: Settings,
    slow_server: str,
    vector_tables: str,
) -> None:
    roomy = settings.model_copy(
        update={
            "database_url": f"{vector_tables}?application_name={SLOW_APP}",
            "vector_schemas": "public,hostile",
            "geojson_max_s": CAP_S,
            "db_pool_size": 1,
            "db_max_overflow": 0,
            "db_pool_timeout_s": 0.5,
        }
    )
    with served(roomy) as base, slow_reader(base) as sock:
        # the whole page was read ahead into memory: its transaction ended at once
        wait_for(lambda: transactions(vector_tables) == 0, 3)
        t0 = time.monotonic()
        r = httpx.get(f"{base}{URL}/public.test_lines?nocache=1", headers=AUTH, timeout=10)
        assert r.status_code == 200  # the one pooled connection is free for others
        assert time.monotonic() - t0 < 2
        sock.settimeout(CAP_S + 5)
        received = b""
        while chunk := sock.recv(1 << 20):  # the slow client still gets the whole page
            received += chunk
    # a page read whole goes out as one body of known length: it ends with the closing member,
    # after every feature; nothing was cut
    assert received.endswith(b'"numberReturned": 10000}')


def test_a_database_error_mid_answer_cuts_it_cleanly(
    slow_server: str,
    vector_tables: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with slow_reader(slow_server) as sock:
        wait_for(lambda: transactions(vector_tables, IDLE) == 1, CAP_S - 1)
        with psycopg.connect(pg(vector_tables), autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (SLOW_APP,),
            )
        sock.settimeout(10)
        received = b""
        while chunk := sock.recv(1 << 20):  # the client reads on: the stream meets the error
            received += chunk
    assert not received.endswith(b"0\r\n\r\n")  # no end of the chunked body: the answer is cut
    assert "cut mid-answer" in caplog.text
    assert "Traceback" not in caplog.text
    r = httpx.get(f"{slow_server}{URL}/public.test_lines?nocache=1", headers=AUTH, timeout=10)
    assert r.status_code == 200  # the pool has a working connection again
