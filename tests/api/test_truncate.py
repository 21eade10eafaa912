"""Truncation (issue 25): a layer's cached tiles for a coverage, zooms, variants and languages
removed by a real worker, on the disk and in the bucket; exactly those, and nothing on a refusal."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from starlette.testclient import TestClient

from api.app import create_app
from shared.base.formats import VARIANTS, TileVariant
from shared.base.grid import TileAddress
from shared.seeding.coverage import Coverage
from shared.settings import Settings
from shared.tiles.store import tile_key
from tests.checks import AUTH, assert_error
from tests.conftest import UP_REDIS_URL, admin_client, worker_process
from tests.jobs import job_lines, wait_running, wait_state
from tests.layers import RGB, RGB_ID, configure
from tests.s3 import KEYS, keys, moto_thread, raw

pytestmark = pytest.mark.worker

#: a box inside the Landsat scene, and a larger one around it whose tiles are cached
BOX = (-78.9, 23.6, -77.5, 24.6)
AROUND = (-80.0, 22.5, -76.0, 26.0)
TRIANGLE = {
    "type": "Polygon",
    "coordinates": [[[-78.9, 23.6], [-76.6, 23.6], [-78.9, 25.5], [-78.9, 23.6]]],
}
LANGS = ("en", "fr")
MOUNTS = ("/api-user", "/api/v1")


def around(zooms: range) -> list[TileAddress]:
    """The tiles meeting :data:`AROUND` at ``zooms``."""
    box = Coverage.box(AROUND)
    return [t for z in zooms for t in box.tiles(z)]


def fill(root: Path, style: str, tiles: list[TileAddress]) -> set[str]:
    """Files standing for cached tiles of ``style``: every language of :data:`LANGS` and every
    variant; their keys."""
    made = set()
    for lang in LANGS:
        for tile in tiles:
            for variant in VARIANTS:
                key = tile_key(style, lang, tile, variant)
                path = root / key
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(b"tile " + key.encode())
                made.add(key)
    return made


def on_disk(root: Path, style: str) -> set[str]:
    """The keys of the files under the style's folder."""
    return {str(p.relative_to(root)) for p in (root / style).rglob("*") if p.is_file()}


def keys_of(
    style: str,
    tiles: list[TileAddress],
    langs: tuple[str, ...] = LANGS,
    variants: tuple[TileVariant, ...] = VARIANTS,
) -> set[str]:
    return {tile_key(style, lang, t, v) for lang in langs for t in tiles for v in variants}


def meeting(coverage: Coverage, tiles: list[TileAddress], zooms: range) -> list[TileAddress]:
    """The tiles of ``tiles`` at ``zooms`` that meet ``coverage``."""
    return [
        t
        for t in tiles
        if t.z in zooms and coverage.meets(t.z, np.array([t.x]), np.array([t.y]))[0]
    ]


def finished(client: TestClient, r: Any) -> dict[str, Any]:
    """The result of the job a request started (waited for when it answered 202)."""
    assert r.status_code in (200, 202), r.text
    if r.status_code == 200:
        result: dict[str, Any] = r.json()
        return result
    job = wait_state(client, r.json()["id"], timeout=120)
    assert job["state"] == "succeeded", job
    return job["result"]  # type: ignore[no-any-return]


def test_a_bbox_removes_exactly_its_tiles_in_every_variant_and_language(
    client: TestClient, settings: Settings, rdb: redis.Redis, scene: str, worker: Any
) -> None:
    root = settings.dirs.rtile
    tiles = around(range(8, 12))
    made = fill(root, scene, tiles)
    other = fill(root, f"{scene}_other", tiles)  # another layer's tiles, the same places
    url = f"/api-user/gis-layer-truncate/{scene}"
    query = {"bbox": ",".join(map(str, BOX)), "minzoom": "9", "maxzoom": "11"}
    r = client.post(url, params=query, headers={"X-Request-ID": "truncate-bbox"})
    result = finished(client, r)
    gone = meeting(Coverage.box(BOX), tiles, range(9, 11))
    assert 0 < len(gone) < len([t for t in tiles if 9 <= t.z < 11])  # some outside the box
    assert on_disk(root, scene) == made - keys_of(scene, gone)
    assert on_disk(root, f"{scene}_other") == other
    per_zoom = {z["zoom"]: z["removed"] for z in result["zooms"]}
    assert per_zoom == {z: len(keys_of(scene, [t for t in gone if t.z == z])) for z in range(9, 11)}
    assert result["removed"] == len(keys_of(scene, gone))
    assert (result["mode"], result["stores"], result["langs"]) == ("remove", ["file"], list(LANGS))
    assert sorted(result["formats"]) == sorted(v.name for v in VARIANTS)
    lines = job_lines(rdb, r.headers["x-job-id"])
    assert any(line.startswith(f"Zoom 9: {per_zoom[9]} tiles removed") for line in lines)
    assert any(line.startswith(f"Zoom 10: {per_zoom[10]} tiles removed") for line in lines)


def test_only_the_variant_and_language_named_go(
    client: TestClient, settings: Settings, scene: str, worker: Any
) -> None:
    root = settings.dirs.rtile
    tiles = around(range(9, 11))
    made = fill(root, scene, tiles)
    webp2x = TileVariant.from_name("webp@2x")
    query = {"tile_format": "webp@2x", "lang": "fr"}
    result = finished(client, client.post(f"/api-user/gis-layer-truncate/{scene}", params=query))
    gone = keys_of(scene, tiles, ("fr",), (webp2x,))
    assert on_disk(root, scene) == made - gone
    assert result["removed"] == len(gone)
    assert (result["formats"], result["langs"]) == (["webp@2x"], ["fr"])
    # two variants, comma-separated; no coverage: every tile of the zooms
    query = {"tile_format": "png,jpg@2x", "minzoom": "10", "maxzoom": "11"}
    finished(client, client.post(f"/api-user/gis-layer-truncate/{scene}", params=query))
    at_10 = [t for t in tiles if t.z == 10]
    more = keys_of(scene, at_10, LANGS, (VARIANTS[0], TileVariant.from_name("jpg@2x")))
    assert on_disk(root, scene) == made - gone - more


def test_a_polygon_or_a_coverage_layer_removes_the_tiles_meeting_it(
    client: TestClient, settings: Settings, scene: str, worker: Any, vector_tables: str
) -> None:
    root = settings.dirs.rtile
    tiles = around(range(8, 11))
    made = fill(root, scene, tiles)
    url = f"/api-user/gis-layer-truncate/{scene}"
    finished(client, client.post(url, params={"minzoom": "9", "maxzoom": "10"}, json=TRIANGLE))
    gone = keys_of(scene, meeting(Coverage.of_geojson(TRIANGLE), tiles, range(9, 10)))
    assert gone
    assert on_disk(root, scene) == made - gone
    # the Bahamas of the countries table, at zoom 10
    query = {"coverage_layer": "public.countries", "where": "iso_a3 = 'BHS'", "minzoom": "10"}
    result = finished(client, client.post(url, params=query))
    assert 0 < result["removed"] < len(keys_of(scene, [t for t in tiles if t.z == 10]))
    assert {int(k.split("/")[2]) for k in made - on_disk(root, scene)} == {9, 10}


def test_dryrun_counts_the_coverage_and_removes_nothing(
    client: TestClient, settings: Settings, scene: str
) -> None:
    root = settings.dirs.rtile
    made = fill(root, scene, around(range(9, 10)))
    plan = client.post(
        f"/api-user/gis-layer-truncate/{scene}",
        params={"bbox": ",".join(map(str, BOX)), "dryrun": "1", "minzoom": "5", "maxzoom": "12"},
    ).json()
    box = Coverage.box(BOX)
    assert [(z["zoom"], z["tiles"]) for z in plan["zooms"]] == [
        (z, box.count(z)) for z in range(5, 12)
    ]
    assert plan["total"] == sum(box.count(z) or 0 for z in range(5, 12))
    everything = client.post(f"/api-user/gis-layer-truncate/{scene}?dryrun=1").json()
    assert [z["tiles"] for z in everything["zooms"]] == [4**z for z in range(25)]
    assert on_disk(root, scene) == made


@pytest.mark.parametrize(
    ("method", "query", "body", "status", "parameter"),
    [
        ("POST", {"tile_format": "gif"}, None, 400, "tile_format"),
        ("POST", {"tile_format": "png@3x"}, None, 400, "tile_format"),
        ("POST", {"lang": "english!"}, None, 400, "lang"),
        ("POST", {"minzoom": "12", "maxzoom": "12"}, None, 400, "minzoom"),
        ("POST", {"maxzoom": "26"}, None, 400, "maxzoom"),
        ("POST", {"bbox": "1,2,3"}, None, 400, "bbox"),
        ("POST", {"where": "name = 'x'"}, None, 400, "where"),
        ("POST", {"bbox": "0,0,1,1"}, TRIANGLE, 400, "body"),
        ("POST", {}, {"type": "LineString", "coordinates": [[0, 0], [1, 1]]}, 400, "type"),
        ("POST", {}, {**TRIANGLE, "coordinates": [[[0.5, 0.5]] * 100_000]}, 413, None),
        ("POST", {"coverage_layer": "public.nosuch"}, None, 404, None),
    ],
)
def test_bad_requests_are_refused_and_remove_nothing(
    client: TestClient,
    settings: Settings,
    scene: str,
    method: str,
    query: dict[str, str],
    body: Any,
    status: int,
    parameter: str | None,
) -> None:
    root = settings.dirs.rtile
    made = fill(root, scene, around(range(9, 10)))
    r = client.request(method, f"/api-user/gis-layer-truncate/{scene}", params=query, json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    if parameter is not None:
        assert parameter in (error["detail"].get("parameter", ""), error["message"]), error
    assert on_disk(root, scene) == made
    unknown = client.post("/api-user/gis-layer-truncate/no-such-layer")
    assert unknown.status_code == 404
    assert_error(unknown.json(), "not-found")


def test_a_caller_without_the_layer_gets_404_through_both_mounts(
    client: TestClient, settings: Settings, rdb: redis.Redis, scene: str
) -> None:
    root = settings.dirs.rtile
    made = fill(root, scene, around(range(9, 10)))
    world = configure(settings, rdb, "single/world.rgb.tif")
    body = {"name": "truncate-limited", "role": "operator", "layers": [world, "public.test_points"]}
    created = client.post("/api-user/api-keys", json=body, headers=AUTH)
    assert created.status_code == 201, created.text
    limited = {"Authorization": f"Bearer {created.json()['key']}"}
    for mount in MOUNTS:
        for method, params, json_body in (
            ("POST", {}, None),
            ("POST", {"dryrun": "1"}, None),
            ("POST", {}, TRIANGLE),
        ):
            r = client.request(
                method,
                f"{mount}/gis-layer-truncate/{scene}",
                params=params,
                json=json_body,
                headers=limited,
            )
            assert r.status_code == 404, r.text
            assert scene not in r.text
            assert r.json()["error"]["detail"]["parameter"] == "id"
        # its own layer, with a coverage layer it may not see
        r = client.post(
            f"{mount}/gis-layer-truncate/{world}",
            params={"coverage_layer": "public.countries", "dryrun": "1"},
            headers=limited,
        )
        assert r.status_code == 404, r.text
        assert r.json()["error"]["detail"]["parameter"] == "coverage_layer"
    assert on_disk(root, scene) == made


def test_a_cancelled_truncation_ends_at_once(
    client: TestClient, settings: Settings, scene: str, worker: Any
) -> None:
    root = settings.dirs.rtile
    tiles = [TileAddress(14, x, y) for x in range(4000, 4400) for y in range(6000, 6060)]
    for tile in tiles:  # 24,000 tiles in 400 columns (PNG only: faster to make)
        path = root / tile_key(scene, "en", tile)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    r = client.post(f"/api-user/gis-layer-truncate/{scene}", params={"async": "1", "minzoom": "14"})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    wait_running(client, job_id)
    assert client.delete(f"/api-user/jobs/{job_id}").status_code in (200, 202, 204)
    started = time.monotonic()
    job = wait_state(client, job_id, timeout=30)
    print(f"truncation of 24,000 tiles: {job['state']}, {len(on_disk(root, scene))} left")
    # (the disk may have removed them all before the cancel: unlinking is fast)
    assert job["state"] in ("cancelled", "succeeded"), job
    assert time.monotonic() - started < 5


# -- object storage ------------------------------------------------------------------------

BUCKET = "mapsvc-test-truncate"


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    with moto_thread(BUCKET) as url:
        yield url


@pytest.fixture(scope="module")
def s3_settings(
    settings: Settings, s3_url: str, raster_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """The tile bucket configured; a work dir and a Redis db of their own (so that the
    session's worker, without a bucket, takes none of these jobs)."""
    mine = settings.model_copy(
        update={
            "work_dir": tmp_path_factory.mktemp("truncate-s3"),
            "redis_url": UP_REDIS_URL,
            "s3_endpoint_url": s3_url,
            "s3_bucket": BUCKET,
            **KEYS,
        }
    )
    (mine.dirs.raster / RGB).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(raster_dir / RGB, mine.dirs.raster / RGB)
    redis.Redis.from_url(mine.redis_url).flushdb()
    configure(mine, redis.Redis.from_url(mine.redis_url, decode_responses=True), RGB)
    return mine


@pytest.fixture(scope="module")
def s3_client(
    s3_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    """The API and a real worker, both with the bucket."""
    log = tmp_path_factory.mktemp("truncate-s3-worker") / "worker.log"
    with worker_process(s3_settings, log):
        with admin_client(create_app(s3_settings), raise_server_exceptions=False) as client:
            yield client


def put_objects(url: str, tiles: list[TileAddress]) -> set[str]:
    client = raw(url)
    made = set()
    for lang in LANGS:
        for tile in tiles:
            for variant in VARIANTS:
                key = tile_key(RGB_ID, lang, tile, variant)
                client.put_object(Bucket=BUCKET, Key=key, Body=b"tile")
                made.add(key)
    return made


def test_truncating_the_bucket_removes_exactly_its_objects(
    s3_client: TestClient, s3_settings: Settings, s3_url: str
) -> None:
    tiles = around(range(8, 10))
    made = put_objects(s3_url, tiles)
    on_file = fill(s3_settings.dirs.rtile, RGB_ID, tiles)
    query = {"bbox": ",".join(map(str, BOX)), "minzoom": "9", "isS3": "1"}
    result = finished(
        s3_client, s3_client.post(f"/api-user/gis-layer-truncate/{RGB_ID}", params=query)
    )
    gone = keys_of(RGB_ID, meeting(Coverage.box(BOX), tiles, range(9, 25)))
    assert gone
    assert keys(s3_url, BUCKET, f"{RGB_ID}/") == made - gone
    assert result["removed"] == len(gone)
    assert result["stores"] == ["s3"]
    assert on_disk(s3_settings.dirs.rtile, RGB_ID) == on_file  # the disk is another cache
    # past 256 columns a zoom is listed flat: the whole zoom 9 (512 columns), one language
    r = s3_client.post(f"/api-user/gis-layer-truncate/{RGB_ID}?isS3=1&lang=fr&minzoom=9&maxzoom=10")
    finished(s3_client, r)
    at_9 = keys_of(RGB_ID, [t for t in tiles if t.z == 9], ("fr",))
    assert keys(s3_url, BUCKET, f"{RGB_ID}/") == made - gone - at_9


def test_expiry_removes_from_the_disk_and_the_bucket(
    s3_client: TestClient, s3_settings: Settings, s3_url: str
) -> None:
    tiles = around(range(7, 10))
    made = put_objects(s3_url, tiles)
    on_file = fill(s3_settings.dirs.rtile, RGB_ID, tiles)
    target = tiles[-1]
    r = s3_client.post(
        f"/api-user/gis-layer-expire/{RGB_ID}",
        content=f"{target.z}/{target.x}/{target.y}\n",
        headers={"Content-Type": "text/plain"},
    )
    result = finished(s3_client, r)
    parents = [
        t for t in tiles if t == TileAddress(t.z, target.x >> (9 - t.z), target.y >> (9 - t.z))
    ]
    assert len(parents) == 3
    gone = keys_of(RGB_ID, parents)
    assert result["stores"] == ["file", "s3"]
    assert result["removed"] == 2 * len(gone)
    assert keys(s3_url, BUCKET, f"{RGB_ID}/") == made - gone
    assert on_disk(s3_settings.dirs.rtile, RGB_ID) == on_file - gone
