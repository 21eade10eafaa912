"""Export to the bucket (``isS3=1``, issue 25): one whole object under
``exports/<layer>/<file>``, nothing left on the disk, read by GDAL from the bucket and by the
``pmtiles`` reader through the download route's range requests, on a real worker and a local
S3-compatible server."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from pmtiles.reader import Reader
from pmtiles.tile import TileType
from starlette.testclient import TestClient

from api.app import create_app
from shared.base.grid import TMS
from shared.seeding.export import export_folder
from shared.seeding.export_s3 import ExportBucket, ExportObject
from shared.settings import Settings
from shared.tiles.s3 import S3TileStore
from shared.tiles.styles import read_style
from tests.checks import AUTH
from tests.conftest import UP_REDIS_URL, admin_client, run_mapsvc, served, worker_process
from tests.layers import RGB, own_layer, tile_url
from tests.s3 import KEYS, keys, moto_thread, raw

pytestmark = pytest.mark.worker

BUCKET = "mapsvc-test-exports"
ZOOMS = {"minzoom": "8", "maxzoom": "10"}


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    with moto_thread(BUCKET) as url:
        yield url


@pytest.fixture(scope="module")
def s3_settings(settings: Settings, s3_url: str) -> Settings:
    """The bucket configured; a Redis db of its own, so that the session's worker (without a
    bucket) takes none of these jobs."""
    return settings.model_copy(
        update={
            "redis_url": UP_REDIS_URL,
            "s3_endpoint_url": s3_url,
            "s3_bucket": BUCKET,
            "s3_prefix": "cache",
            **KEYS,
        }
    )


@pytest.fixture(scope="module")
def s3_api(s3_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The API and a real worker, both with the bucket."""
    redis.Redis.from_url(s3_settings.redis_url).flushdb()
    with (
        worker_process(s3_settings, tmp_path_factory.mktemp("s3export") / "worker.log"),
        admin_client(create_app(s3_settings), raise_server_exceptions=False) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def scene(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> str:
    return own_layer(settings, rdb, RGB, "export-s3", "scene.tif")


def export(api: TestClient, layer: str, archive: str) -> dict[str, Any]:
    r = api.post(
        f"/api-user/gis-layer-export/{layer}", params={**ZOOMS, "archive": archive, "isS3": 1}
    )
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def test_an_mbtiles_export_is_one_object_in_the_bucket_read_by_gdal(
    s3_api: TestClient, s3_settings: Settings, s3_url: str, scene: str
) -> None:
    result = export(s3_api, scene, "mbtiles")
    key = f"cache/exports/{scene}/{result['file']}"
    assert result["s3"] == {"bucket": BUCKET, "key": key}
    assert keys(s3_url, BUCKET, "cache/exports/") == {key}
    head = raw(s3_url).head_object(Bucket=BUCKET, Key=key)
    assert head["ContentLength"] == result["bytes"]
    assert head["ContentType"] == "application/vnd.sqlite3"
    folder = export_folder(s3_settings.dirs.exports, scene)
    assert not folder.is_dir() or list(folder.iterdir()) == []  # nothing left on the disk
    env = {
        "PATH": "/usr/bin:/bin",
        "AWS_S3_ENDPOINT": s3_url.removeprefix("http://"),
        "AWS_HTTPS": "NO",
        "AWS_VIRTUAL_HOSTING": "FALSE",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
    }
    done = subprocess.run(
        ["gdalinfo", f"/vsis3/{BUCKET}/{key}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Driver: MBTiles/MBTiles" in done.stdout
    assert "ZOOM_LEVEL=9" in done.stdout  # its last zoom, the full resolution


def test_a_pmtiles_export_in_the_bucket_is_read_by_ranges_through_the_route(
    s3_api: TestClient, s3_settings: Settings, s3_url: str, scene: str
) -> None:
    result = export(s3_api, scene, "pmtiles")
    with served(s3_settings) as base:
        url = f"{base}{result['url']}"
        asked: list[int] = []

        def get_bytes(offset: int, length: int) -> bytes:
            r = httpx.get(url, headers={**AUTH, "Range": f"bytes={offset}-{offset + length - 1}"})
            asked.append(r.status_code)
            assert r.headers["content-range"] == (
                f"bytes {offset}-{offset + len(r.content) - 1}/{result['bytes']}"
            )
            return r.content

        reader = Reader(get_bytes)
        header = reader.header()
        assert header["tile_type"] == TileType.PNG
        assert header["addressed_tiles_count"] == result["tiles"] == result["plan"]["total"]
        w, s, e, n = read_style(s3_settings.dirs.mapnik, scene).footprint
        inside = TMS.tile((w + e) / 2, (s + n) / 2, 9)  # a tile of the scene, cached by the export
        tile = s3_api.get(tile_url(scene, 9, inside.x, inside.y))
        assert tile.headers["x-cache"] == "HIT"
        assert reader.get(9, inside.x, inside.y) == tile.content
        assert set(asked) == {206}

        whole = httpx.get(url, headers=AUTH)
        assert whole.status_code == 200
        assert whole.headers["content-type"] == "application/vnd.pmtiles"
        stored = raw(s3_url).get_object(Bucket=BUCKET, Key=result["s3"]["key"])["Body"].read()
        assert whole.content == stored
        assert len(stored) == result["bytes"]
        outside = httpx.get(url, headers={**AUTH, "Range": f"bytes={result['bytes'] + 10}-"})
        assert outside.status_code == 416
        assert outside.headers["content-range"] == f"bytes */{result['bytes']}"
        assert outside.json()["error"]["code"] == "range-not-satisfiable"
        missing = url.replace(result["file"][:8], "00000000")
        assert httpx.get(missing, headers=AUTH).status_code == 404
    assert os.listdir(export_folder(s3_settings.dirs.exports, scene)) == []


def test_cli_export_to_the_bucket_is_served_by_the_download_route(
    s3_api: TestClient, s3_settings: Settings, s3_url: str, scene: str
) -> None:
    done = run_mapsvc(
        s3_settings, "export", scene, "--archive", "pmtiles", "--minzoom", "8", "--maxzoom", "9",
        "--bbox=-78.4,24.0,-77.1,25.1", "--s3", check=True,
    )  # fmt: skip
    match = re.fullmatch(rf"s3://{BUCKET}/(\S+): (\d+) tiles, (\d+) bytes\n", done.stdout)
    assert match, done.stdout
    key, size = match[1], int(match[3])
    prefix = f"cache/exports/{scene}/"
    assert key.startswith(prefix)
    assert key in keys(s3_url, BUCKET, prefix)
    name = key.removeprefix(prefix)
    r = s3_api.get(f"/api/v1/gis-layer-export/{scene}/files/{name}", headers={"Range": "bytes=0-6"})
    assert r.status_code == 206
    assert r.headers["content-range"] == f"bytes 0-6/{size}"
    assert r.content == b"PMTiles"
    assert name not in os.listdir(export_folder(s3_settings.dirs.exports, scene))


def test_a_layer_keeps_its_newest_exports_in_the_bucket(tmp_path: Path) -> None:
    with moto_thread("prune") as url:
        bucket = ExportBucket(
            S3TileStore(
                endpoint_url=url,
                bucket="prune",
                prefix="tiles",
                access_key_id="testing",
                secret_access_key="testing",
            )
        )
        names = [f"{i:08x}-0000-0000-0000-000000000000.pmtiles" for i in range(3)]
        for name in names:
            (tmp_path / name).write_bytes(b"PMTiles" + name.encode())
            bucket.upload(tmp_path / name, "public.a b/c", name, keep=2)
            time.sleep(1.1)  # LastModified counts seconds
        folder = "tiles/exports/public.a%20b%2Fc/"
        assert keys(url, "prune", "tiles/") == {folder + name for name in names[1:]}
        found = bucket.read("public.a b/c", names[2], "bytes=-4")
        assert isinstance(found, ExportObject)
        assert (b"".join(found.chunks), found.size) == (names[2][-4:].encode(), 7 + len(names[2]))
        assert found.content_range == f"bytes {found.size - 4}-{found.size - 1}/{found.size}"
        assert bucket.read("public.a b/c", names[0], None) is None
