"""Expiry lists (issue 25): osm2pgsql's ``z/x/y`` lists or a polygon remove (or draw again) the
tiles they name with their parents and children, from raster caches and vector caches (the
API's and the nginx front's), by a real worker; a bad list is refused naming its line."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from starlette.testclient import TestClient

from shared.base.formats import TileVariant
from shared.base.grid import TileAddress
from shared.job_messages import Sweep
from shared.jobs import JobReporter, JobStore
from shared.seeding.coverage import Coverage
from shared.seeding.expiry import MAX_BYTES, MAX_LINES
from shared.seeding.truncate import run_sweep
from shared.settings import Settings
from shared.tiles.store import tile_key
from shared.tiles.stores import tile_stores
from tests.api.test_truncate import (
    LANGS,
    MOUNTS,
    TRIANGLE,
    around,
    fill,
    finished,
    keys_of,
    meeting,
    on_disk,
)
from tests.checks import AUTH
from tests.conftest import free_port, served
from tests.jobs import job_lines, wait_state
from tests.layers import configure, decode, tile_url

pytestmark = pytest.mark.worker

#: a tile of zoom 9 inside the Landsat scene (and inside the box of `around`)
T9 = TileAddress(9, 143, 218)
TEXT = {"Content-Type": "text/plain"}


def family(tiles: list[TileAddress], listed: TileAddress) -> list[TileAddress]:
    """The tiles of ``tiles`` that are ``listed``, a parent of it, or a child of it."""

    def under(child: TileAddress, parent: TileAddress) -> bool:
        d = child.z - parent.z
        return d >= 0 and (child.x >> d, child.y >> d) == (parent.x, parent.y)

    return [t for t in tiles if under(t, listed) or under(listed, t)]


def expire(client: TestClient, layer: str, body: Any, **params: str) -> Any:
    if isinstance(body, str):
        return client.post(
            f"/api-user/gis-layer-expire/{layer}", params=params, content=body, headers=TEXT
        )
    return client.post(f"/api-user/gis-layer-expire/{layer}", params=params, json=body)


def test_a_listed_tile_goes_with_its_parents_and_children(
    client: TestClient, settings: Settings, rdb: redis.Redis, scene: str, worker: Any
) -> None:
    root = settings.dirs.rtile
    tiles = around(range(7, 12))
    made = fill(root, scene, tiles)
    other = fill(root, f"{scene}_other", tiles)
    r = expire(client, scene, f"{T9.z}/{T9.x}/{T9.y}\n")
    result = finished(client, r)
    gone = family(tiles, T9)
    assert sorted({t.z for t in gone}) == [7, 8, 9, 10, 11]
    assert len([t for t in gone if t.z == 11]) == 16  # its children, all cached
    assert on_disk(root, scene) == made - keys_of(scene, gone)  # its siblings are kept
    assert on_disk(root, f"{scene}_other") == other
    assert result["removed"] == len(keys_of(scene, gone))
    assert (result["mode"], result["stores"], result["langs"]) == ("remove", ["file"], list(LANGS))
    per_zoom = {z["zoom"]: z["removed"] for z in result["zooms"] if z["removed"]}
    assert per_zoom == {z: 2 * 6 * len([t for t in gone if t.z == z]) for z in range(7, 12)}
    lines = job_lines(rdb, r.headers["x-job-id"])
    assert any(line.startswith(f"Zoom 11: {per_zoom[11]} tiles removed") for line in lines)
    # the same as a JSON array, within zooms: a child of zoom 10 and its parents from zoom 8
    child = TileAddress(10, 2 * T9.x + 2, 2 * T9.y)
    left = on_disk(root, scene)
    query = {"minzoom": "8", "maxzoom": "11"}
    finished(client, expire(client, scene, [f"{child.z}/{child.x}/{child.y}"], **query))
    second = [t for t in family(tiles, child) if 8 <= t.z < 11]
    assert on_disk(root, scene) == left - keys_of(scene, second)


def test_a_polygon_body_expires_the_tiles_meeting_it(
    client: TestClient, settings: Settings, scene: str, worker: Any
) -> None:
    root = settings.dirs.rtile
    tiles = around(range(8, 11))
    made = fill(root, scene, tiles)
    finished(client, expire(client, scene, TRIANGLE, minzoom="9", maxzoom="11", buffer="16"))
    gone = meeting(Coverage.of_geojson(TRIANGLE, 16), tiles, range(9, 11))
    assert gone
    assert on_disk(root, scene) == made - keys_of(scene, gone)


def test_dryrun_counts_parents_and_children(client: TestClient, scene: str) -> None:
    lines = f"{T9.z}/{T9.x}/{T9.y}\n9/{T9.x - 1}/{T9.y}\n11/{4 * T9.x}/{4 * T9.y}\n"
    plan = expire(client, scene, lines, dryrun="1", minzoom="6", maxzoom="12").json()
    # zoom 6-8: one parent of both; 9: the two; 10, 11: their children (the listed 11 is one)
    assert [(z["zoom"], z["tiles"]) for z in plan["zooms"]] == [
        (6, 1),
        (7, 1),
        (8, 1),
        (9, 2),
        (10, 8),
        (11, 32),
    ]
    assert plan["total"] == 45


BIG_LINES = "0/0/0\n" * (MAX_LINES + 1)


@pytest.mark.parametrize(
    ("body", "headers", "params", "status", "message"),
    [
        ("9/1/1\nnot a tile\n", TEXT, {}, 400, "line 2"),
        ("9/1/1\n\n9/512/0\n", TEXT, {}, 400, "line 3"),
        ("25/0/0", TEXT, {}, 400, "line 1"),
        ("9/-1/0", TEXT, {}, 400, "line 1"),
        ("9/١/0", TEXT, {}, 400, "line 1"),  # an Arabic-Indic digit: not a column
        ('["9/1/1", 5]', {"Content-Type": "application/json"}, {}, 400, "item 2"),
        ('["9/1/1", "9/1"]', {"Content-Type": "application/json"}, {}, 400, "item 2"),
        (
            '{"type": "Point", "coordinates": [0, 0]}',
            {"Content-Type": "application/json"},
            {},
            400,
            "Polygon",
        ),
        ("[" * 30_000 + "]" * 30_000, {"Content-Type": "application/json"}, {}, 400, "not JSON"),
        ("9/1/1", {"Content-Type": "image/png"}, {}, 400, "text/plain"),
        (b"9/1/1\xff", TEXT, {}, 400, "UTF-8"),
        ("", TEXT, {}, 400, "name the tiles"),
        ("9/1/1", TEXT, {"bbox": "0,0,1,1"}, 400, "once"),
        ("9/1/1", TEXT, {"mode": "redraw"}, 400, "mode"),
        ("[]", {"Content-Type": "application/json"}, {}, 400, "no tile"),
        (BIG_LINES, TEXT, {}, 413, f"at most {MAX_LINES}"),
        ("0/0/0\n" * (MAX_BYTES // 6 + 1), TEXT, {}, 413, "larger than"),
    ],
    ids=[
        "not a tile",
        "off the grid",
        "zoom 25",
        "negative",
        "unicode digit",
        "a number in JSON",
        "two parts in JSON",
        "a point",
        "nested past Python's depth",
        "an image",
        "not UTF-8",
        "nothing",
        "a body and a bbox",
        "an unknown mode",
        "an empty array",
        "too many lines",
        "too many bytes",
    ],
)
def test_a_bad_expiry_is_refused_and_removes_nothing(
    client: TestClient,
    settings: Settings,
    scene: str,
    body: str | bytes,
    headers: dict[str, str],
    params: dict[str, str],
    status: int,
    message: str,
) -> None:
    root = settings.dirs.rtile
    made = fill(root, scene, [T9])
    started = time.perf_counter()
    r = client.post(
        f"/api-user/gis-layer-expire/{scene}", params=params, content=body, headers=headers
    )
    assert time.perf_counter() - started < 5
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert message in error["message"], error
    if message.startswith(("line", "item")):
        assert error["detail"] == {"parameter": "body", "line": int(message.split()[1])}
    assert on_disk(root, scene) == made


def test_rerender_draws_the_cached_tiles_again(
    client: TestClient, settings: Settings, scene: str, worker: Any
) -> None:
    root = settings.dirs.rtile
    for suffix in (".png", "@2x.webp"):
        assert client.get(tile_url(scene, 8, 72, 110, suffix=suffix)).status_code == 200
    png = root / scene / "en" / "8" / "72" / "110.png"
    webp = root / scene / "en" / "8" / "72" / "110@2x.webp"
    sibling = root / scene / "en" / "8" / "73" / "110.png"
    sibling.parent.mkdir(parents=True, exist_ok=True)
    for path in (png, webp, sibling):
        path.write_bytes(b"stale")
        os.utime(path, (1_000_000_000, 1_000_000_000))
    result = finished(client, expire(client, scene, "8/72/110\n", mode="rerender"))
    assert (result["mode"], result["rerendered"], result["removed"]) == ("rerender", 2, 0)
    fresh = client.get(tile_url(scene, 8, 72, 110, "?nocache=1")).content
    assert png.stat().st_mtime > 1_000_000_000
    assert webp.stat().st_mtime > 1_000_000_000
    assert (decode(png.read_bytes()) == decode(fresh)).all()  # the tile, drawn again
    assert decode(webp.read_bytes()).shape == (4, 512, 512)
    assert sibling.read_bytes() == b"stale"  # not listed: untouched
    assert not (root / scene / "en" / "9").exists()  # the children not cached stay uncached


def test_a_rerender_past_its_cap_removes_the_rest(
    settings: Settings, rdb: redis.Redis, scene: str
) -> None:
    """In process: the cap of tiles drawn again (``MAPSVC_PRETILE_MAX_TILES`` in the worker)."""
    root = settings.dirs.rtile
    tiles = list(around(range(9, 10)))[:5]
    fill(root, scene, tiles)
    store = JobStore(rdb, settings)
    job_id = str(uuid.uuid4())
    store.create(job_id, "test", {})
    drawn: list[tuple[str, TileAddress, str]] = []

    def render(style: str, lang: str, tile: TileAddress, variant: Any) -> bytes:
        drawn.append((lang, tile, variant.name))
        return b"fresh"

    listed = {"tiles": [f"{t.z}/{t.x}/{t.y}" for t in tiles]}
    sweep = Sweep(scene, False, listed, 9, 10, rerender=True)
    with tile_stores(settings) as stores:
        result = run_sweep(
            sweep,
            JobReporter(store, job_id),
            stores=stores,
            client=rdb,
            render=render,
            rerender_max=7,
        )
    assert (result["rerendered"], result["removed"]) == (7, 5 * 2 * 6 - 7)
    kept = on_disk(root, scene)
    assert len(kept) == 7
    assert all((root / key).read_bytes() == b"fresh" for key in kept)


def test_a_rerender_is_cancelled_between_tiles(
    client: TestClient, settings: Settings, scene: str, worker: Any
) -> None:
    root = settings.dirs.rtile
    tiles = around(range(12, 13))  # 1,800 tiles, drawn again at 512 px
    retina = TileVariant.from_name("webp@2x")
    paths = [root / tile_key(scene, "en", t, retina) for t in tiles]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"stale")
    body = "\n".join(f"{t.z}/{t.x}/{t.y}" for t in tiles)
    r = expire(client, scene, body, mode="rerender", minzoom="12", maxzoom="13", **{"async": "1"})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    deadline = time.monotonic() + 30
    while all(path.read_bytes() == b"stale" for path in paths[:50]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert client.delete(f"/api-user/jobs/{job_id}").status_code == 202
    started = time.monotonic()
    job = wait_state(client, job_id, timeout=30)
    assert job["state"] == "cancelled", job
    assert time.monotonic() - started < 3
    drawn = sum(path.read_bytes() != b"stale" for path in paths)
    print(f"rerender cancelled after {drawn} of {len(tiles)} tiles")
    assert 0 < drawn < len(tiles)


def test_a_caller_without_the_layer_gets_404_through_both_mounts(
    client: TestClient, settings: Settings, rdb: redis.Redis, scene: str
) -> None:
    root = settings.dirs.rtile
    made = fill(root, scene, [T9])
    world = configure(settings, rdb, "single/world.rgb.tif")
    body = {"name": "expiry-limited", "role": "operator", "layers": [world]}
    created = client.post("/api-user/api-keys", json=body, headers=AUTH)
    limited = {"Authorization": f"Bearer {created.json()['key']}"}
    for mount in MOUNTS:
        for params in ({}, {"dryrun": "1"}, {"coverage_layer": "public.countries"}):
            r = client.post(
                f"{mount}/gis-layer-expire/{scene}",
                params=params,
                content=f"{T9.z}/{T9.x}/{T9.y}",
                headers={**TEXT, **limited},
            )
            assert r.status_code == 404, r.text
            assert scene not in r.text
    assert on_disk(root, scene) == made


# -- vector caches -------------------------------------------------------------------------


def cached_vector_tiles(rdb: redis.Redis, layer: str) -> set[str]:
    """The tiles of ``layer`` in the API's vector cache (its books), as ``z/x/y``."""
    return {
        str(key).rsplit(":", 2)[1]
        for key, _ in rdb.zscan_iter(
            "mapsvc:budget:vector:entries", match=f"mapsvc:vector:mvt:{layer}:*"
        )
        if rdb.exists(str(key))
    }


@pytest.mark.usefixtures("vector_tables")
def test_a_vector_layer_s_cached_tiles_are_removed_from_the_api_cache(
    client: TestClient, rdb: redis.Redis, worker: Any
) -> None:
    layer = "public.countries"
    asked = ["2/1/1", "3/2/2", "2/2/1", "3/4/2"]
    for name in asked:
        r = client.get(f"/api-user/vtile/{layer}/{name}.pbf")
        assert r.status_code in (200, 204), r.text
    r = client.get(f"/api-user/vtile/{layer}/2/1/1.pbf", params={"props": "name"})
    assert r.status_code in (200, 204)  # the same tile asked otherwise: its own answer
    assert cached_vector_tiles(rdb, layer) >= set(asked)
    page = f"/api-user/geojson/{layer}?limit=2"
    client.get(page)
    assert client.get(page).headers["x-cache"] == "HIT"
    result = finished(client, expire(client, layer, "2/1/1\n"))
    # its data changed: its GeoJSON answers go too (they are no tile of anywhere)
    assert client.get(page).headers["x-cache"] == "MISS"
    # 2/1/1 twice (two answers) and its child 3/2/2 at least (other tests may have cached more
    # answers of them); 2/2/1 and 3/4/2 are not in its family
    assert result["vector_cache"] == result["removed"] >= 3
    assert result["front_cache"] == 0
    left = cached_vector_tiles(rdb, layer)
    assert {"2/1/1", "3/2/2"}.isdisjoint(left)
    assert {"2/2/1", "3/4/2"} <= left
    assert client.get(f"/api-user/vtile/{layer}/2/1/1.pbf").headers["x-cache"] == "MISS"
    assert client.get(f"/api-user/vtile/{layer}/2/2/1.pbf").headers["x-cache"] == "HIT"
    # truncation of a vector layer: every tile of zoom 3
    result = finished(
        client,
        client.post(
            f"/api-user/gis-layer-truncate/{layer}", params={"minzoom": "3", "maxzoom": "4"}
        ),
    )
    assert "3/4/2" not in cached_vector_tiles(rdb, layer)
    assert "2/2/1" in cached_vector_tiles(rdb, layer)
    assert result["vector_cache"] >= 1
    assert client.get(page).headers["x-cache"] == "HIT"  # a truncation changed no data


@pytest.mark.skipif(shutil.which("nginx") is None, reason="needs nginx")
@pytest.mark.usefixtures("vector_tables")
def test_the_front_s_kept_vector_tiles_are_removed(
    settings: Settings, rdb: redis.Redis, raster_dir: Path, worker: Any
) -> None:
    from tests.api.test_front import front, front_work

    gzip = {"Accept-Encoding": "gzip"}
    with front_work(settings, rdb, raster_dir) as work:
        mine = work.model_copy(
            update={
                "public_layers": "public.countries",
                "port": free_port(),
                "front_vtile_ttl_s": 60,
            }
        )
        with served(mine) as api, front(mine, api.removeprefix("http://")) as base:
            urls = {
                name: f"{base}/api-user/vtile/public.countries/{name}.pbf"
                for name in ("1/0/0", "1/1/0")
            }
            ogc = f"{base}/api/v1/ogc/collections/public.countries/tiles/WebMercatorQuad/1/0/0.mvt"
            for url in (*urls.values(), ogc):
                for headers in (gzip, {"Accept-Encoding": "identity"}):
                    httpx.get(url, headers=headers)
                    kept = httpx.get(url, headers=headers)
                    assert "x-request-id" not in kept.headers, url  # the front answered
            r = httpx.post(
                f"{api}/api/v1/gis-layer-expire/public.countries",
                content="1/0/0\n",
                headers={**TEXT, **AUTH},
                timeout=120,
            )
            assert r.status_code == 200, r.text
            result = r.json()
            assert result["front_cache"] == 4  # vtile and OGC, gzip and not
            again = httpx.get(urls["1/0/0"], headers=gzip)
            assert "x-request-id" in again.headers  # the API answered: the front kept none
            assert again.headers["x-cache"] == "MISS"  # nor did the API's cache
            assert "x-request-id" not in httpx.get(urls["1/1/0"], headers=gzip).headers
