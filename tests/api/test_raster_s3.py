"""Source rasters in an S3 bucket (``MAPSVC_RASTER_STORE=s3``), against a local moto server.

The demo rasters (``deploy/demo-data``) are uploaded under a prefix; the API and a real Celery
worker run with the bucket as their raster store, in a work dir and a Redis db of their own. Every
answer is compared with the same raster's answer from the file store (the session's work dir).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
import redis
from rasterio.io import MemoryFile
from starlette.testclient import TestClient

from api.app import create_app
from shared.demo import DEMO_DATA
from shared.raster.compress import compress_file
from shared.raster.paths import encode_id
from shared.settings import Settings
from tests.checks import assert_error
from tests.conftest import (
    UP_REDIS_URL,
    admin_client,
    free_port,
    worker_process,
)
from tests.jobs import job_lines
from tests.layers import MOSAIC_ID, RGB, RGB_ID, decode, stored_tiles, tile_url
from tests.s3 import KEYS, keys, moto_process, raw

pytestmark = [pytest.mark.worker]

BUCKET = "mapsvc-test-rasters"
#: the tile cache of isS3=1: the endpoint of the rasters turns it on too
TILE_BUCKET = "mapsvc-test-raster-tiles"
PREFIX = "sources"
#: the demo rasters, uploaded as they are
RASTERS = [
    "single/RGB.byte.tif",
    "single/shade.tif",
    "single/world.rgb.tif",
    *(f"bahamas-tiles/rgb{i}.tif" for i in range(1, 5)),
    "broken/corrupt.tif",
]
#: what the file store's raster folder holds besides (tests/conftest.py `raster_dir`)
NOT_RASTERS = {"single/notes.txt": b"not a raster", "single/fake.tif": b"text pretending"}
#: tiles inside the Landsat scene (its quarters cover it too)
TILES = [(8, 72, 110), (11, 580, 883), (12, 1161, 1767)]


@pytest.fixture(scope="module")
def s3_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local S3-compatible server with the rasters under ``PREFIX/``."""
    with moto_process(tmp_path_factory.mktemp("moto") / "moto.log") as url:
        client = raw(url)
        client.create_bucket(Bucket=BUCKET)
        client.create_bucket(Bucket=TILE_BUCKET)
        for rel in RASTERS:
            client.upload_file(str(DEMO_DATA / "raster" / rel), BUCKET, f"{PREFIX}/{rel}")
        for rel, data in NOT_RASTERS.items():
            client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{rel}", Body=data)
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/docs/readme.txt", Body=b"no raster")
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/empty/", Body=b"")  # a folder marker
        # outside the prefix: never listed, never read
        client.upload_file(str(DEMO_DATA / "raster" / RGB), BUCKET, "elsewhere/RGB.byte.tif")
        yield url


@pytest.fixture(scope="module")
def environment() -> Iterator[None]:
    """The process environment as it was: the apps made here set GDAL's AWS_* options."""
    before = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(before)


@pytest.fixture(scope="module")
def s3_settings(
    settings: Settings, s3_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """The raster store in the bucket; a work dir and a Redis db of their own (so that the
    session's worker, whose store is the file one, takes none of these jobs)."""
    return settings.model_copy(
        update={
            "work_dir": tmp_path_factory.mktemp("s3work"),
            "redis_url": UP_REDIS_URL,
            "raster_store": "s3",
            "raster_s3_bucket": BUCKET,
            "raster_s3_prefix": PREFIX,
            "s3_endpoint_url": s3_url,
            "s3_bucket": TILE_BUCKET,
            **KEYS,
        }
    )


@pytest.fixture(scope="module")
def s3_worker(
    s3_settings: Settings, environment: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A real Celery worker whose raster store is the bucket; yields its log file."""
    redis.Redis.from_url(s3_settings.redis_url).flushdb()
    log = tmp_path_factory.mktemp("s3worker") / "worker.log"
    with worker_process(s3_settings, log):
        yield log


@pytest.fixture(scope="module")
def s3_tc(s3_settings: Settings, s3_worker: Path) -> Iterator[TestClient]:
    """The API with the bucket as its raster store."""
    with admin_client(create_app(s3_settings), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture(scope="module")
def s3_rdb(s3_settings: Settings) -> redis.Redis:
    return redis.Redis.from_url(s3_settings.redis_url, decode_responses=True)


@pytest.fixture(scope="module")
def configured(s3_tc: TestClient) -> dict[str, Any]:
    """The Landsat scene and the folder of its quarters, configured from the bucket (worker)."""
    answers = {}
    for rel in (RGB, "bahamas-tiles"):
        r = s3_tc.get(f"/api-user/gis-raster/{rel}")
        assert r.status_code == 200, r.text
        answers[rel] = {"body": r.json(), "job": r.headers["x-job-id"]}
    return answers


def rows_of(body: dict[str, Any], paths: set[str] | None = None) -> list[dict[str, Any]]:
    """The listing's rows without ``islayer`` (the two stores have work dirs of their own)."""
    rows = [{k: v for k, v in row.items() if k != "islayer"} for row in body["rows"]]
    return [row for row in rows if paths is None or row["path"] in paths]


# -- listing, stat, info: answered in the API, read through boto3 and GDAL's /vsis3/ ----------


def test_listing_is_the_file_stores(
    s3_tc: TestClient, client: TestClient, raster_dir: Path
) -> None:
    root = s3_tc.get("/api-user/gis-raster")
    assert root.status_code == 200, root.text
    body = root.json()
    assert isinstance(body["time"], int)
    assert body["folder"] == ""
    # folders with rasters only: not docs/ (no raster), not empty/ (a marker), not elsewhere/
    assert [(r["name"], r["type"], r["path"]) for r in body["rows"]] == [
        ("bahamas-tiles", "dir", "bahamas-tiles"),
        ("broken", "dir", "broken"),
        ("single", "dir", "single"),
    ]
    mine = {"bahamas-tiles", "broken", "single"}
    assert rows_of(body) == rows_of(client.get("/api-user/gis-raster").json(), mine)
    for folder in ("single", "bahamas-tiles", "broken/", "./single"):
        ours = s3_tc.get("/api-user/gis-raster", params={"folder": folder}).json()
        theirs = client.get("/api-user/gis-raster", params={"folder": folder}).json()
        assert ours["folder"] == theirs["folder"] == folder.strip("./")
        paths = {row["path"] for row in ours["rows"]}
        assert rows_of(ours) == rows_of(theirs, paths)
        assert paths == {rel for rel in RASTERS if rel.startswith(folder.strip("./") + "/")}
    empty = s3_tc.get("/api-user/gis-raster", params={"folder": "empty"})
    assert empty.status_code == 200
    assert empty.json()["rows"] == []


@pytest.mark.parametrize(
    ("folder", "status"),
    [("../", 400), ("/etc", 400), ("nope", 404), (RGB, 400), ("a/../../x", 400), ("x\\y", 400)],
)
def test_listing_refuses_bad_folders(s3_tc: TestClient, folder: str, status: int) -> None:
    r = s3_tc.get("/api-user/gis-raster", params={"folder": folder})
    assert r.status_code == status, r.text
    assert_error(r.json(), "not-found" if status == 404 else "invalid-input")


def test_listing_follows_new_objects(s3_tc: TestClient, s3_url: str) -> None:
    body = s3_tc.get("/api-user/gis-raster?folder=bahamas-tiles").json()
    assert len(body["rows"]) == 4
    raw(s3_url).upload_file(
        str(DEMO_DATA / "raster" / "bahamas-tiles" / "rgb1.tif"),
        BUCKET,
        f"{PREFIX}/bahamas-tiles/later/rgb5.tif",
    )
    try:
        rows = s3_tc.get("/api-user/gis-raster?folder=bahamas-tiles").json()["rows"]
        assert [(r["path"], r["type"]) for r in rows][0] == ("bahamas-tiles/later", "dir")
    finally:
        raw(s3_url).delete_object(Bucket=BUCKET, Key=f"{PREFIX}/bahamas-tiles/later/rgb5.tif")


def strip_time(stat: dict[str, Any]) -> dict[str, Any]:
    return {**stat, "time": 0, "files": [{**f, "time": 0} for f in stat["files"]]}


@pytest.mark.parametrize("rel", [RGB, "single/shade.tif", "single/world.rgb.tif"])
def test_stat_of_a_file(s3_tc: TestClient, client: TestClient, raster_dir: Path, rel: str) -> None:
    r = s3_tc.get(f"/api-user/gis-raster-stat/{encode_id(rel)}")
    assert r.status_code == 200, r.text
    ours, theirs = r.json(), client.get(f"/api-user/gis-raster-stat/{encode_id(rel)}").json()
    assert ours["stat"]["size"] == (DEMO_DATA / "raster" / rel).stat().st_size
    for key in ("cdate", "edate"):  # the object's LastModified, as ISO without offset
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", ours["stat"][key])
    assert {**strip_time(ours), "stat": None} == {**strip_time(theirs), "stat": None}
    assert ours["files"][0]["err"] == ""


def test_stat_of_folders(s3_tc: TestClient) -> None:
    body = s3_tc.get(f"/api-user/gis-raster-stat/{MOSAIC_ID}").json()
    assert body["type"] == "dir"
    assert (body["stat"]["size"], body["stat"]["count"]) == (None, 4)
    assert body["files"] == [{"name": f"rgb{i}.tif"} for i in range(1, 5)]
    assert body["stat"]["cdate"] <= body["stat"]["edate"]
    # the corrupt file: GDAL's own words, read through /vsis3/ (the truncation check too)
    (entry,) = s3_tc.get(f"/api-user/gis-raster-stat/{encode_id('broken')}").json()["files"]
    assert entry["name"] == "corrupt.tif"
    assert "TIFFReadEncodedTile() failed" in entry["err"]


@pytest.mark.parametrize(
    ("raster_id", "status"),
    [
        ("!!notbase64", 400),
        (encode_id("../../etc/passwd"), 400),
        (encode_id("/etc/passwd"), 400),
        (encode_id("single/nope.tif"), 404),
        (encode_id("nope"), 404),
        (encode_id("docs"), 404),  # a folder without rasters
        (encode_id("empty"), 404),  # a folder marker only
        (encode_id("single/notes.txt"), 422),  # not a raster
    ],
)
def test_stat_refuses_bad_ids(s3_tc: TestClient, raster_id: str, status: int) -> None:
    r = s3_tc.get(f"/api-user/gis-raster-stat/{raster_id}")
    assert r.status_code == status, r.text
    code = {400: "invalid-input", 404: "not-found", 422: "unprocessable"}[status]
    assert_error(r.json(), code)
    assert BUCKET not in r.text  # no storage address in a user's answer


def test_stat_cache_follows_the_objects_etag(s3_tc: TestClient, s3_url: str) -> None:
    key, rel = f"{PREFIX}/single/changing.tif", "single/changing.tif"
    client = raw(s3_url)
    client.upload_file(str(DEMO_DATA / "raster" / RGB), BUCKET, key)
    url = f"/api-user/gis-raster-stat/{encode_id(rel)}"
    try:
        assert s3_tc.get(url).json()["files"][0]["rasterSize"] == [791, 718]
        client.upload_file(str(DEMO_DATA / "raster" / "single" / "world.rgb.tif"), BUCKET, key)
        assert s3_tc.get(url).json()["files"][0]["rasterSize"] == [512, 256]
        info = s3_tc.get(f"/api-user/gis-raster-info/{encode_id(rel)}").json()
        assert info["size"] == [512, 256]  # GDAL did not keep the old object's bytes
    finally:
        client.delete_object(Bucket=BUCKET, Key=key)
    assert s3_tc.get(url).status_code == 404


@pytest.mark.parametrize(
    ("layer", "file"),
    [
        (RGB, None),
        ("single/shade.tif", None),
        ("bahamas-tiles/rgb3.tif", None),
        ("bahamas-tiles", "bahamas-tiles/rgb2.tif"),
        ("bahamas-tiles", None),  # its mosaic VRT (in the derived folder, over /vsis3/ files)
    ],
)
def test_info_is_the_file_stores(
    s3_tc: TestClient, client: TestClient, raster_dir: Path, layer: str, file: str | None
) -> None:
    params = {"file": file} if file else {}
    r = s3_tc.get(f"/api-user/gis-raster-info/{encode_id(layer)}", params=params)
    assert r.status_code == 200, r.text
    theirs = client.get(f"/api-user/gis-raster-info/{encode_id(layer)}", params=params).json()
    assert r.json() == theirs
    assert "vsis3" not in r.text
    assert BUCKET not in r.text


def test_info_errors(s3_tc: TestClient) -> None:
    corrupt = s3_tc.get(f"/api-user/gis-raster-info/{encode_id('broken/corrupt.tif')}")
    assert corrupt.status_code == 422
    error = assert_error(corrupt.json(), "unprocessable")
    assert error["message"].startswith("broken/corrupt.tif: ")
    assert "TIFFReadEncodedTile() failed" in error["message"]
    assert error["detail"] == {"path": "broken/corrupt.tif"}
    assert "vsis3" not in corrupt.text
    url = f"/api-user/gis-raster-info/{encode_id('single')}"  # files of the folder's layer
    for file, status in [
        ("single/nope.tif", 404),
        ("single/notes.txt", 400),
        ("single/fake.tif", 400),
        ("../../etc/passwd", 400),
    ]:
        r = s3_tc.get(url, params={"file": file})
        assert r.status_code == status, (file, r.text)
        assert_error(r.json(), "not-found" if status == 404 else "invalid-input")


# -- jobs on the worker: configuration, tiles, pre-tiling, compression -------------------------


def test_configure_from_the_bucket(
    s3_tc: TestClient,
    configured: dict[str, Any],
    s3_rdb: redis.Redis,
    s3_settings: Settings,
    s3_url: str,
) -> None:
    body = configured[RGB]["body"]
    assert (body["id"], body["layer"]) == ("RGB.byte.tif", RGB_ID)
    assert body["extent"] == pytest.approx([-78.9586, 23.5650, -76.5749, 25.5509], abs=1e-3)
    assert body["url"] == f"/api-user/rtile/{RGB_ID}/en/{{z}}/{{x}}/{{y}}.png"
    lines = job_lines(s3_rdb, configured[RGB]["job"])
    assert any(line.startswith(f"Sources: 1 file(s) of s3://{BUCKET}/{PREFIX}/") for line in lines)
    assert lines[-1] == "Finish:success"
    descriptors = next(line for line in lines if line.startswith('[{"name":'))
    assert '"rasterSize":[791,718]' in descriptors
    # Mapnik reads the copy in the build folder: local paths only in the XML
    xml = (s3_settings.dirs.mapnik / f"{RGB_ID}.xml").read_text()
    files = re.findall(r'<Parameter name="file">([^<]+)</Parameter>', xml)
    assert files
    assert not [f for f in files if f.startswith("/")]
    (copy,) = (s3_settings.dirs.derived / RGB_ID).glob("b-*/source/RGB.byte.tif")
    assert copy.read_bytes() == (DEMO_DATA / "raster" / RGB).read_bytes()
    # nothing was written to the bucket by a configuration
    assert keys(s3_url, BUCKET, f"{PREFIX}/single/") == {
        f"{PREFIX}/{rel}" for rel in [*RASTERS, *NOT_RASTERS] if rel.startswith("single/")
    }
    rows = s3_tc.get("/api-user/gis-raster?folder=single").json()["rows"]
    listed = {row["path"]: row["islayer"] for row in rows}
    assert listed[RGB] is True
    assert listed["single/shade.tif"] is False


def test_configure_again_reuses_the_copies(
    s3_tc: TestClient, configured: dict[str, Any], s3_rdb: redis.Redis
) -> None:
    again = s3_tc.get(f"/api-user/gis-raster/{RGB}")
    assert again.status_code == 200, again.text
    lines = job_lines(s3_rdb, again.headers["x-job-id"])
    assert any("(up to date)" in line and line.startswith("Sources: ") for line in lines)


def test_configure_a_folder_layer(
    configured: dict[str, Any], s3_rdb: redis.Redis, s3_settings: Settings
) -> None:
    assert configured["bahamas-tiles"]["body"]["id"] == "bahamas-tiles"
    lines = job_lines(s3_rdb, configured["bahamas-tiles"]["job"])
    assert any(line.startswith("VRT: 4 files -> mosaic.vrt") for line in lines)
    (build,) = (s3_settings.dirs.derived / MOSAIC_ID).glob("b-*")
    with (
        rasterio.open(build / "mosaic.vrt") as mosaic,
        rasterio.open(DEMO_DATA / "raster" / RGB) as scene,
    ):
        assert mosaic.bounds == scene.bounds
        assert np.array_equal(mosaic.read(), scene.read())
        assert all(not f.startswith("/vsi") for f in mosaic.files)


@pytest.mark.parametrize(("layer", "tiles"), [(RGB_ID, TILES), (MOSAIC_ID, TILES[:2])])
def test_tiles_are_the_file_stores(
    s3_tc: TestClient,
    client: TestClient,
    configured: dict[str, Any],
    layers: None,
    layer: str,
    tiles: list[tuple[int, int, int]],
) -> None:
    for z, x, y in tiles:
        ours = s3_tc.get(tile_url(layer, z, x, y, "?nocache=1"))
        assert ours.status_code == 200, ours.text
        theirs = client.get(tile_url(layer, z, x, y, "?nocache=1"))
        pixels = decode(ours.content)
        assert pixels[3].max() == 255  # a tile of the scene, not an empty one
        assert (pixels[:3] > 0).mean() > 0.2
        assert np.array_equal(pixels, decode(theirs.content)), (layer, z, x, y)


def test_pretile_from_the_bucket(
    s3_tc: TestClient, configured: dict[str, Any], s3_rdb: redis.Redis, s3_settings: Settings
) -> None:
    r = s3_tc.get(f"/api-user/gis-layer-pretile/{RGB_ID}?minzoom=8&maxzoom=10")
    assert r.status_code == 200, r.text
    result = r.json()
    assert [(z["zoom"], z["tiles"], z["rendered"]) for z in result["zooms"]] == [
        (8, 6, 6),
        (9, 20, 20),
    ]
    assert (result["rendered"], result["skipped"]) == (26, 0)
    assert job_lines(s3_rdb, r.headers["x-job-id"])[-1] == "Finish:success"
    stored = stored_tiles(s3_settings, RGB_ID)
    assert len(stored) == 26
    assert {z for z, _, _ in stored} == {8, 9}


def test_compress_writes_the_copy_to_the_bucket(
    s3_tc: TestClient, s3_url: str, s3_settings: Settings, s3_rdb: redis.Redis, tmp_path: Path
) -> None:
    r = s3_tc.get(f"/api-user/gis-layer-compress/{RGB_ID}")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["folder"] == "single/commpress"
    (entry,) = body["files"]
    key = f"{PREFIX}/single/commpress/RGB.byte.tif"
    stored = raw(s3_url).get_object(Bucket=BUCKET, Key=key)["Body"].read()
    assert entry["size"] == (DEMO_DATA / "raster" / RGB).stat().st_size
    assert entry["compressed"] == len(stored)
    lines = job_lines(s3_rdb, r.headers["x-job-id"])
    assert lines[0].startswith("Start compression: 1 file(s) -> commpress/")
    assert lines[-1] == "Finish:success"
    # the same bytes as a compression of the local file; and it opens through /vsis3/ too
    reference = tmp_path / "ref.tif"
    compress_file(DEMO_DATA / "raster" / RGB, reference)
    with MemoryFile(stored) as mem, mem.open() as ours, rasterio.open(reference) as ref:
        assert ours.profile == ref.profile
        assert ours.profile["compress"] == "lzw"
        assert np.array_equal(ours.read(), ref.read())
    with rasterio.open(f"/vsis3/{BUCKET}/{key}") as remote:
        assert (remote.width, remote.height, remote.count) == (791, 718, 3)
    assert stored[:4] == b"II+\x00"  # BigTIFF
    # nothing staged is left behind, and the listing still shows the layer only
    assert not list((s3_settings.dirs.derived / ".uploads").iterdir())
    rows = s3_tc.get("/api-user/gis-raster?folder=single").json()["rows"]
    assert "commpress" not in {row["name"] for row in rows}


def test_compress_failure_stores_nothing(s3_tc: TestClient, s3_url: str) -> None:
    r = s3_tc.get(f"/api-user/gis-layer-compress/{encode_id('single/shade.tif')}")
    assert r.status_code == 422
    error = assert_error(r.json(), "unprocessable")
    assert "shade.tif has 1 band(s)" in error["message"]
    assert not [k for k in keys(s3_url, BUCKET, f"{PREFIX}/single/commpress/") if "shade" in k]


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("/api-user/gis-raster/single/nope.tif", 404),
        ("/api-user/gis-raster/..%2Fx", 400),
        (f"/api-user/gis-layer-compress/{encode_id('nope')}", 404),
        (f"/api-user/gis-layer-compress/{encode_id('single/nope.tif')}", 404),
        (tile_url(encode_id("single/nope.tif"), 8, 72, 110), 404),
    ],
)
def test_missing_objects_are_404s(s3_tc: TestClient, url: str, status: int) -> None:
    r = s3_tc.get(url)
    assert r.status_code == status, r.text
    assert_error(r.json(), "not-found" if status == 404 else "invalid-input")


def test_storage_down_is_a_503(s3_settings: Settings, environment: None) -> None:
    down = s3_settings.model_copy(update={"s3_endpoint_url": f"http://127.0.0.1:{free_port()}"})
    before = dict(os.environ)
    try:
        with admin_client(create_app(down), raise_server_exceptions=False) as tc:
            for url in (
                "/api-user/gis-raster?folder=single",
                f"/api-user/gis-raster-stat/{RGB_ID}",
                f"/api-user/gis-raster-info/{RGB_ID}",
            ):
                r = tc.get(url)
                assert r.status_code == 503, r.text
                assert "cannot connect" in assert_error(r.json(), "unavailable")["message"]
                assert "127.0.0.1" not in r.text
    finally:  # GDAL in this process reads the moto server again
        os.environ.clear()
        os.environ.update(before)
