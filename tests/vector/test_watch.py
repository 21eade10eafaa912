"""Watched layers (issue 35): an edit of a watched table reaches every cache within seconds.

A real follower process (``mapsvc follow``), the API on uvicorn and the nginx front before it:
tiles are read through the front before and after each kind of edit (insert, an update that
moves a feature across tiles, delete, a 100,000-row update, ``TRUNCATE``). Every tile that
touches an old or new geometry is fresh on the next request; tiles elsewhere keep their entry
in the front and their ``ETag``. The follower is killed in the middle of a burst of edits and
started again: nothing stale remains.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import morecantile
import psycopg
import pytest
import redis

from shared.seeding.follow import POSITION_KEY, coalesce
from shared.settings import Settings
from shared.vector.watch import Change, newest_change
from tests.checks import AUTH, assert_error
from tests.conftest import free_port, pg, served, settings_env
from tests.interop.gdal import run
from tests.vector.test_tiles import decode

pytestmark = pytest.mark.skipif(shutil.which("nginx") is None, reason="needs nginx")

LAYER = "public.watch_points"
TMS = morecantile.tms.get("WebMercatorQuad")
Z = 8
#: when the follower expires a batch again (the setting's 12 s, shortened)
SETTLE_S = 1.0
#: where the features are: A moves to C; B stays; D is where the many rows are
A, B, C, D = (10.3, 45.3), (-20.3, 30.3), (30.3, 10.3), (100.3, -30.3)


def tile_of(point: tuple[float, float]) -> str:
    t = TMS.tile(point[0], point[1], Z)
    return f"{t.z}/{t.x}/{t.y}"


def names(data: bytes, tile: str, tmp_path: Path) -> set[str]:
    if not data:
        return set()
    z, x, y = (int(v) for v in tile.split("/"))
    return {str(f["name"]) for f in decode(data, z, x, y, tmp_path, LAYER)}


class World:
    """The front, the API, the database and the follower of the module."""

    def __init__(self, base: str, api: str, db: str, settings: Settings, rdb: redis.Redis) -> None:
        self.base, self.api, self.db, self.rdb = base, api, db, rdb
        self.env, self.mapnik = settings_env(settings), settings.dirs.mapnik
        self.follower: subprocess.Popen[bytes] | None = None

    def start_follower(self) -> None:
        self.follower = subprocess.Popen([sys.executable, "-m", "api.cli", "follow"], env=self.env)

    def kill_follower(self) -> None:
        assert self.follower is not None
        self.follower.send_signal(signal.SIGKILL)
        self.follower.wait(timeout=10)
        self.follower = None

    def sql(self, statement: str, params: Any = None) -> None:
        with psycopg.connect(self.db, autocommit=True) as conn:
            conn.execute(statement, params)

    def newest_change(self) -> int:
        with psycopg.connect(self.db, autocommit=True) as conn:
            return newest_change(conn)

    def settled(self, timeout_s: float = 20) -> float:
        """Wait until the follower expired every change logged; the seconds it took."""
        newest, started = self.newest_change(), time.monotonic()
        while int(self.rdb.get(POSITION_KEY) or 0) < newest:
            assert time.monotonic() - started < timeout_s, "the follower did not catch up"
            time.sleep(0.02)
        return time.monotonic() - started

    def tile(self, tile: str, **headers: str) -> httpx.Response:
        """A tile through the front, asked anonymously (the front keeps it)."""
        return httpx.get(f"{self.base}/api-user/vtile/{LAYER}/{tile}.pbf", headers=headers)

    def fresh(self, tile: str) -> bytes:
        """The tile as the database has it now (the API, no cache)."""
        r = httpx.get(
            f"{self.api}/api-user/vtile/{LAYER}/{tile}.pbf",
            params={"nocache": 1},
            headers={**AUTH, "Accept-Encoding": "identity"},
        )
        return r.content


@pytest.fixture(scope="module")
def world(
    settings: Settings, rdb: redis.Redis, raster_dir: Path, vector_tables: str
) -> Iterator[World]:
    from tests.api.test_front import front, front_work

    db = pg(settings.database_url)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            """
            DROP TABLE IF EXISTS watch_points;
            CREATE TABLE watch_points (id serial PRIMARY KEY, name text,
                                       geom geometry(Point, 4326));
            CREATE INDEX ON watch_points USING gist (geom);
            """
        )
        for name, (lon, lat) in {"a": A, "b": B}.items():
            conn.execute(
                "INSERT INTO watch_points (name, geom) VALUES (%s, ST_Point(%s, %s, 4326))",
                (name, lon, lat),
            )
        conn.execute("ANALYZE watch_points")
    rdb.delete(POSITION_KEY)
    with front_work(settings, rdb, raster_dir) as work:
        mine = work.model_copy(
            update={
                "public_layers": LAYER,
                "port": free_port(),
                "front_vtile_ttl_s": 600,
                "front": "nginx",
                "vector": work.vector.model_copy(update={"watch_settle_s": SETTLE_S}),
            }
        )
        with served(mine) as api, front(mine, api.removeprefix("http://")) as base:
            r = httpx.put(f"{api}/api-user/watches/{LAYER}", headers=AUTH)
            assert r.status_code == 200, r.text
            assert r.json()["layer"] == LAYER
            world = World(base, api, db, mine, rdb)
            world.start_follower()
            try:
                yield world
            finally:
                if world.follower is not None:
                    world.follower.terminate()
                    world.follower.wait(timeout=20)
                httpx.delete(f"{api}/api-user/watches/{LAYER}", headers=AUTH)


def test_an_edit_expires_the_tiles_it_touches_and_keeps_the_others(
    world: World, tmp_path: Path
) -> None:
    a, b, c = tile_of(A), tile_of(B), tile_of(C)
    gz = {"Accept-Encoding": "gzip"}
    for tile in (a, b, c):
        world.tile(tile, **gz)
        assert "x-request-id" not in world.tile(tile, **gz).headers  # the front keeps it
    kept = world.tile(b, **{"Accept-Encoding": "identity"})
    etag = kept.headers["etag"]
    assert names(world.tile(a, **{"Accept-Encoding": "identity"}).content, a, tmp_path) == {"a"}

    # an update that moves a feature across tiles: both tiles fresh at once
    world.sql("UPDATE watch_points SET geom = ST_Point(%s, %s, 4326) WHERE name = 'a'", C)
    seconds = world.settled()
    assert seconds < 5
    assert world.tile(a).status_code == 204  # (the front asks the API again)
    assert names(world.tile(c, **{"Accept-Encoding": "identity"}).content, c, tmp_path) == {"a"}
    # elsewhere: the front's kept answer, the same ETag, and 304 to If-None-Match
    again = world.tile(b, **{"Accept-Encoding": "identity"})
    assert again.headers["etag"] == etag
    assert "x-request-id" not in world.tile(b, **gz).headers
    assert (
        world.tile(b, **{"Accept-Encoding": "identity", "If-None-Match": etag}).status_code == 304
    )

    # an insert, then a delete
    world.sql("INSERT INTO watch_points (name, geom) VALUES ('new', ST_Point(%s, %s, 4326))", A)
    world.settled()
    assert names(world.tile(a, **{"Accept-Encoding": "identity"}).content, a, tmp_path) == {"new"}
    world.sql("DELETE FROM watch_points WHERE name = 'new'")
    world.settled()
    assert world.tile(a).status_code == 204
    assert world.tile(b, **{"Accept-Encoding": "identity"}).headers["etag"] == etag


def test_a_large_update_is_one_change_and_expires_its_area_only(world: World) -> None:
    d = tile_of(D)
    world.sql(
        "INSERT INTO watch_points (name, geom) SELECT 'many', ST_Point(%s + (i %% 300) / 1000.0,"
        " %s + (i / 300) / 1000.0, 4326) FROM generate_series(1, 100000) AS i",
        D,
    )
    world.settled()
    before = world.tile(d, **{"Accept-Encoding": "identity"}).content
    b = world.tile(tile_of(B), **{"Accept-Encoding": "identity"})
    first = world.newest_change()
    world.sql("UPDATE watch_points SET name = 'renamed' WHERE name = 'many'")
    assert world.newest_change() == first + 1  # 100,000 rows: one record
    world.settled()
    after = world.tile(d, **{"Accept-Encoding": "identity"})
    assert after.content != before
    assert after.content == world.fresh(d)
    kept = world.tile(tile_of(B), **{"Accept-Encoding": "identity"})
    assert kept.headers["etag"] == b.headers["etag"]
    assert "x-request-id" not in kept.headers


def test_a_killed_follower_catches_up_and_nothing_stale_remains(world: World) -> None:
    tiles = {tile_of((A[0] + i, A[1])) for i in range(0, 8)} | {tile_of(B)}
    for tile in tiles:
        world.tile(tile)
    stop = threading.Event()

    def burst() -> None:
        for i in range(200):
            if stop.is_set():
                return
            world.sql(
                "INSERT INTO watch_points (name, geom) VALUES (%s, ST_Point(%s, %s, 4326))",
                (f"burst {i}", A[0] + (i % 8), A[1]),
            )

    writer = threading.Thread(target=burst)
    writer.start()
    time.sleep(0.3)
    world.kill_follower()  # mid-burst: the log keeps what it has not read
    writer.join(timeout=60)
    stop.set()
    for tile in tiles:  # read while it is away: stale answers are kept meanwhile
        world.tile(tile)
    world.start_follower()
    world.settled(timeout_s=30)
    for tile in sorted(tiles):
        r = world.tile(tile, **{"Accept-Encoding": "identity"})
        assert r.content == world.fresh(tile), tile


_MAP = """<?xml version="1.0" encoding="utf-8"?>
<Map srs="epsg:3857" background-color="transparent">
  <Style name="dots"><Rule><MarkersSymbolizer fill="#d00000" width="12" height="12"
    allow-overlap="true"/></Rule></Style>
  <Layer name="points" srs="epsg:4326"><StyleName>dots</StyleName>
    <Datasource>{params}</Datasource></Layer>
</Map>
"""


def test_the_raster_tiles_of_a_style_drawing_the_table_are_drawn_again(world: World) -> None:
    url = urlsplit(world.db)
    params = {"type": "postgis", "host": url.hostname or "127.0.0.1", "port": str(url.port)}
    params |= {"dbname": url.path.lstrip("/"), "user": url.username or "postgres"}
    params |= {"table": "(SELECT geom FROM watch_points) AS p", "geometry_field": "geom"}
    params |= {"srid": "4326", "extent": "-180,-85,180,85"}
    xml = "".join(f'<Parameter name="{k}">{v}</Parameter>' for k, v in params.items())
    world.mapnik.joinpath("dots.xml").write_text(_MAP.format(params=xml))
    # the second expiry of the edits before (1 s after each, here) would drop these tiles too
    world.settled()
    time.sleep(SETTLE_S + 0.5)
    url_of = {t: f"{world.api}/api-user/rtile/dots/{t}.png" for t in (tile_of(A), tile_of(B))}
    for tile, url in url_of.items():
        assert httpx.get(url, headers=AUTH).status_code == 200
        assert httpx.get(url, headers=AUTH).headers["x-cache"] == "HIT", tile
    before = httpx.get(url_of[tile_of(A)], headers=AUTH).content
    dot = (A[0] + 0.5, A[1] + 0.2)  # in A's tile, where no point was
    assert tile_of(dot) == tile_of(A)
    world.sql("INSERT INTO watch_points (name, geom) VALUES ('dot', ST_Point(%s, %s, 4326))", dot)
    world.settled()
    again = httpx.get(url_of[tile_of(A)], headers=AUTH)
    assert again.headers["x-cache"] == "MISS"  # the file was removed: drawn again
    assert again.content != before  # with the new dot
    assert httpx.get(url_of[tile_of(B)], headers=AUTH).headers["x-cache"] == "HIT"


def test_a_watched_layer_says_so_and_its_tiles_are_asked_again_each_time(world: World) -> None:
    tj = httpx.get(f"{world.api}/api-user/gis-datasource/{LAYER}", headers=AUTH).json()
    assert tj["watched"] is True
    r = world.tile(tile_of(B), **{"Accept-Encoding": "identity"})
    assert r.headers["cache-control"] == "public, no-cache"  # then 304 while it is the same
    other = httpx.get(f"{world.api}/api-user/vtile/public.test_points/0/0/0.pbf", headers=AUTH)
    assert "max-age=3600" in other.headers["cache-control"]  # (private: not a public layer)


def test_a_truncate_expires_everything(world: World) -> None:
    b = tile_of(B)
    assert world.tile(b).status_code == 200
    world.sql("TRUNCATE watch_points")
    world.settled()
    assert world.tile(b).status_code == 204


def test_the_layer_stream_says_what_changed(world: World) -> None:
    lines: list[str] = []

    def listen() -> None:
        url = f"{world.api}/api-user/watches/{LAYER}/events"
        with httpx.stream("GET", url, headers=AUTH, timeout=10) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    lines.append(line.removeprefix("data: "))
                    return

    listener = threading.Thread(target=listen)
    listener.start()
    time.sleep(0.5)  # (new lines only: the stream is open before the edit)
    world.sql("INSERT INTO watch_points (name, geom) VALUES ('told', ST_Point(%s, %s, 4326))", B)
    listener.join(timeout=15)
    assert lines, "no layer-changed line"
    kind, _, body = lines[0].partition(" ")
    assert kind == "layer-changed"
    said = json.loads(body)
    assert said["layer"] == LAYER
    assert said["changes"] == 1
    west, south, east, north = said["bbox"]
    assert west <= B[0] <= east
    assert south <= B[1] <= north


def test_watching_is_the_admin_s_and_refuses_what_cannot_be(world: World) -> None:
    api = world.api
    view = httpx.put(f"{api}/api-user/watches/public.big_countries", headers=AUTH)
    assert view.status_code == 422, view.text
    assert "view" in assert_error(view.json(), "unprocessable")["message"]
    unknown = httpx.put(f"{api}/api-user/watches/public.no_such_table", headers=AUTH)
    assert unknown.status_code == 404
    assert httpx.put(f"{api}/api-user/watches/{LAYER}").status_code == 401
    listed = httpx.get(f"{api}/api-user/watches", headers=AUTH).json()
    assert [w["layer"] for w in listed["layers"]] == [LAYER]  # nothing else was watched
    assert listed["follower"]["running"]
    not_watched = httpx.delete(f"{api}/api-user/watches/public.test_lines", headers=AUTH)
    assert not_watched.status_code == 404


def test_changes_of_a_layer_are_taken_together_and_bounded() -> None:
    changes = [
        Change(1, "s.a", "INSERT", [[0, 0, 1, 1]], 1),
        Change(2, "s.b", "UPDATE", [[5, 5, 6, 6]], 1),
        Change(3, "s.a", "DELETE", [[2, 2, 2, 2]], 1),
        Change(4, "s.b", "TRUNCATE", None, None),
        Change(5, "s.b", "INSERT", [[7, 7, 8, 8]], 1),
    ]
    a, b = coalesce(changes)
    assert (a.layer, a.changes, a.boxes, a.bbox) == (
        "s.a",
        2,
        [[0, 0, 1, 1], [2, 2, 2, 2]],
        [0, 0, 2, 2],
    )
    assert (b.layer, b.changes, b.boxes, b.bbox) == ("s.b", 3, None, None)  # everywhere
    many = [Change(i, "s.c", "INSERT", [[i * 0.01, 0, i * 0.01, 0]], 1) for i in range(5000)]
    (c,) = coalesce(many, most=100)
    assert c.boxes is not None
    assert len(c.boxes) <= 100
    assert c.bbox == [0, 0, 49.99, 0]  # every change still covered


def test_gdal_s_oapif_and_mvt_readers_see_an_edit_at_once(world: World, tmp_path: Path) -> None:
    """What QGIS reads through GDAL: the items (OAPIF, from the API's cached pages) and a
    vector tile (MVT, through the front), each read by a fresh ``ogr2ogr``."""
    tile = tile_of(B)
    z, x, y = tile.split("/")

    def read(source: str, *options: str) -> set[str]:
        out = tmp_path / f"read-{time.monotonic_ns()}.geojson"
        run("ogr2ogr", "-f", "GeoJSON", *options, str(out), source, LAYER)
        return {str(f["properties"]["name"]) for f in json.loads(out.read_text())["features"]}

    oapif = f"OAPIF:{world.base}/api-user/ogc"
    mvt = f"/vsicurl/{world.base}/api-user/vtile/{LAYER}/{tile}.pbf"
    tile_options = ("-oo", f"X={x}", "-oo", f"Y={y}", "-oo", f"Z={z}")
    before_items, before_tile = read(oapif), read(mvt, *tile_options)
    assert "gdal" not in before_items | before_tile
    world.sql("INSERT INTO watch_points (name, geom) VALUES ('gdal', ST_Point(%s, %s, 4326))", B)
    world.settled()
    assert read(oapif) == before_items | {"gdal"}
    assert read(mvt, *tile_options) == before_tile | {"gdal"}


def test_one_caller_never_takes_every_event_stream(world: World, settings: Settings) -> None:
    """An anonymous client (counted by its address) opens streams of the public layer until
    its share is gone: its next one is ``429``; another caller still gets one; closing one
    gives the share back."""
    mine = settings.jobs.sse_streams_per_caller
    url = f"{world.api}/api-user/watches/{LAYER}/events"
    with ExitStack() as streams, httpx.Client(timeout=10) as client:
        for _ in range(mine):
            r = streams.enter_context(client.stream("GET", url))
            assert r.status_code == 200
        with client.stream("GET", url) as refused:
            refused.read()
            assert refused.status_code == 429
            assert refused.headers["retry-after"] == "5"
            assert assert_error(refused.json(), "rate-limited")["detail"]["limit"] == mine
        with client.stream("GET", url, headers=AUTH) as other:
            assert other.status_code == 200  # another caller: its own share
        streams.close()
        deadline = time.monotonic() + 5
        while True:  # the server sees the closed connections a moment later
            with client.stream("GET", url) as again:
                if again.status_code == 200:
                    break
            assert time.monotonic() < deadline, "the streams were not given back"
            time.sleep(0.2)


def test_a_role_that_may_not_make_triggers_is_told_how_and_changes_nothing(
    world: World, settings: Settings
) -> None:
    with psycopg.connect(world.db, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS watch_owned; DROP ROLE IF EXISTS watch_weak")
        conn.execute("CREATE ROLE watch_weak LOGIN")
        conn.execute(
            "CREATE TABLE watch_owned (id serial PRIMARY KEY, geom geometry(Point, 4326));"
            " GRANT SELECT ON watch_owned TO watch_weak"
        )
    url = urlsplit(world.db)
    weak = url._replace(netloc=f"watch_weak@{url.hostname}:{url.port or 5432}")
    done = subprocess.run(
        [sys.executable, "-m", "api.cli", "watch", "public.watch_owned"]
        + ["--database-url", weak.geturl()],
        env=world.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "may not make triggers on public.watch_owned" in done.stderr
    assert "run `mapsvc watch` as the table's owner" in done.stderr
    with psycopg.connect(world.db, autocommit=True) as conn:
        triggers = conn.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'watch_owned'::regclass"
        ).fetchone()
        conn.execute("DROP TABLE watch_owned; DROP ROLE watch_weak")
    assert triggers == (0,)
    listed = httpx.get(f"{world.api}/api-user/watches", headers=AUTH).json()["layers"]
    assert [w["layer"] for w in listed] == [LAYER]


def test_a_log_made_again_is_read_from_its_start(world: World, tmp_path: Path) -> None:
    """A position past the log's newest change (the log dropped and made again: its ids start
    over) is read from the log's start, not waited past."""
    world.kill_follower()
    world.rdb.set(POSITION_KEY, 10**9)
    world.start_follower()
    deadline = time.monotonic() + 20
    while int(world.rdb.get(POSITION_KEY) or 0) > world.newest_change():
        assert time.monotonic() < deadline, "the follower kept a position past the log"
        time.sleep(0.05)
    b = tile_of(B)
    world.tile(b)  # kept by the front
    world.sql("INSERT INTO watch_points (name, geom) VALUES ('anew', ST_Point(%s, %s, 4326))", B)
    world.settled()
    fresh = world.tile(b, **{"Accept-Encoding": "identity"}).content
    assert "anew" in names(fresh, b, tmp_path)
