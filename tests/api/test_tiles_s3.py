"""Tiles cached in S3-compatible object storage (``isS3=1``), against a local moto server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from botocore.stub import Stubber
from starlette.testclient import TestClient

from api.app import create_app
from shared.errors import InvalidInputError, UnavailableError
from shared.jobs import JobReporter, JobStore
from shared.raster.layer import configure_layer
from shared.settings import Settings
from shared.tiles import s3 as s3_module
from shared.tiles.s3 import S3TileStore
from shared.tiles.stores import s3_store, tile_stores
from tests.checks import assert_error
from tests.conftest import admin_client, free_port
from tests.layers import RGB, RGB_ID, decode, tile_url
from tests.s3 import KEYS, keys, moto_thread, raw

BUCKET = "mapsvc-test-tiles"


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    """A local S3-compatible server (moto in server mode) with the test bucket."""
    with moto_thread(BUCKET) as url:
        yield url


@pytest.fixture(scope="module")
def s3_settings(settings: Settings, s3_url: str) -> Settings:
    return settings.model_copy(update={"s3_endpoint_url": s3_url, "s3_bucket": BUCKET, **KEYS})


@pytest.fixture(scope="module")
def s3_tc(s3_settings: Settings, layers: None) -> Iterator[TestClient]:
    with admin_client(create_app(s3_settings), raise_server_exceptions=False) as client:
        yield client


def test_s3_miss_then_hit_etag_and_304(
    s3_tc: TestClient, s3_url: str, s3_settings: Settings
) -> None:
    z, x, y = 11, 580, 883
    url = tile_url(RGB_ID, z, x, y, "?isS3=1")
    first = s3_tc.get(url)
    assert first.status_code == 200, first.text
    assert first.headers["x-cache"] == "MISS"
    assert decode(first.content)[3].max() == 255  # a tile of the scene, not an empty one
    key = f"{RGB_ID}/en/{z}/{x}/{y}.png"
    stored = raw(s3_url).get_object(Bucket=BUCKET, Key=key)
    assert stored["Body"].read() == first.content
    assert stored["ContentType"] == "image/png"
    assert keys(s3_url, BUCKET, f"{RGB_ID}/") >= {key}
    # the file cache is not touched by an isS3 request
    tile_dir = s3_settings.dirs.rtile / RGB_ID / "en" / str(z) / str(x)
    assert not (tile_dir / f"{y}.png").exists()
    second = s3_tc.get(url)
    assert second.headers["x-cache"] == "HIT"
    assert second.content == first.content
    assert second.headers["etag"] == first.headers["etag"]
    not_modified = s3_tc.get(url, headers={"If-None-Match": first.headers["etag"]})
    assert not_modified.status_code == 304
    assert not_modified.content == b""
    assert not_modified.headers["x-cache"] == "HIT"
    # without isS3 the same tile is a miss of the file cache
    assert s3_tc.get(tile_url(RGB_ID, z, x, y)).headers["x-cache"] == "MISS"
    # the form without the lang segment shares the key
    bare = s3_tc.get(f"/api-user/rtile/{RGB_ID}/{z}/{x}/{y}.png?isS3=1")
    assert bare.headers["x-cache"] == "HIT"


def test_s3_nocache_stores_nothing(s3_tc: TestClient, s3_url: str) -> None:
    r = s3_tc.get(tile_url(RGB_ID, 11, 581, 883, "?nocache=1&isS3=1"))
    assert r.status_code == 200
    assert r.headers["x-cache"] == "MISS"
    assert decode(r.content)[3].max() == 255
    assert not keys(s3_url, BUCKET, f"{RGB_ID}/en/11/581/")


def test_store_get_put_exists_and_prefix(s3_url: str) -> None:
    with S3TileStore(endpoint_url=s3_url, bucket=BUCKET, prefix="/pfx/", **plain_keys()) as store:
        assert store.get("s/en/1/0/0.png") is None
        assert not store.exists("s/en/1/0/0.png")
        store.put("s/en/1/0/0.png", b"png bytes")
        assert store.get("s/en/1/0/0.png") == b"png bytes"
        assert store.exists("s/en/1/0/0.png")
    assert "pfx/s/en/1/0/0.png" in keys(s3_url, BUCKET, "pfx/")


def plain_keys() -> dict[str, str]:
    return {"access_key_id": "testing", "secret_access_key": "testing"}


def test_drop_style_removes_only_that_style(
    s3_url: str, s3_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # small pages and batches: the listing is paginated and deleted in several requests
    monkeypatch.setattr(s3_module, "DELETE_BATCH", 3)
    client = raw(s3_url)
    doomed = {f"dropme/{lang}/5/{x}/1.png" for lang in ("en", "de") for x in range(6)}
    kept = {"dropme2/en/5/0/1.png", "other/en/5/0/1.png", "pfx/dropme/en/5/0/1.png"}
    for key in doomed | kept:
        client.put_object(Bucket=BUCKET, Key=key, Body=b"x")
    calls = []
    with s3_store(s3_settings) as store:
        real_delete = store._delete

        def counting_delete(batch: Any, style: str) -> None:
            calls.append(len(batch))
            real_delete(batch, style)

        monkeypatch.setattr(store, "_delete", counting_delete)
        store.drop_style("dropme")
        for unsafe in ("", "..", "a/b", "x" * 300):
            with pytest.raises(InvalidInputError, match="a style is a layer id"):
                store.drop_style(unsafe)
    assert calls == [3, 3, 3, 3]
    remaining = keys(s3_url, BUCKET)
    assert not doomed & remaining
    assert kept <= remaining


def test_configure_drops_the_style_from_s3(
    s3_tc: TestClient, s3_url: str, s3_settings: Settings, rdb: redis.Redis
) -> None:
    assert s3_tc.get(tile_url(RGB_ID, 11, 580, 884, "?isS3=1")).status_code == 200
    raw(s3_url).put_object(Bucket=BUCKET, Key="another-style/en/5/0/1.png", Body=b"x")
    assert keys(s3_url, BUCKET, f"{RGB_ID}/")
    store = JobStore(rdb, s3_settings)
    job_id = str(uuid.uuid4())
    store.create(job_id, "test", {})
    with tile_stores(s3_settings) as stores:
        assert len(stores.all()) == 2
        configure_layer(
            s3_settings.work_dir,
            RGB,
            JobReporter(store, job_id),
            lang="en",
            url_prefix="/api-user",
            refresh=True,
            stores=stores.all(),
        )
    assert not keys(s3_url, BUCKET, f"{RGB_ID}/")
    assert "another-style/en/5/0/1.png" in keys(s3_url, BUCKET)
    assert not (s3_settings.dirs.rtile / RGB_ID).exists()
    # the tile is rendered and stored again
    again = s3_tc.get(tile_url(RGB_ID, 11, 580, 884, "?isS3=1"))
    assert again.headers["x-cache"] == "MISS"
    assert keys(s3_url, BUCKET, f"{RGB_ID}/") == {f"{RGB_ID}/en/11/580/884.png"}


def test_s3_down_is_a_503(settings: Settings, layers: None) -> None:
    down = settings.model_copy(
        update={"s3_endpoint_url": f"http://127.0.0.1:{free_port()}", **KEYS}
    )
    with admin_client(create_app(down), raise_server_exceptions=False) as client:
        r = client.get(tile_url(RGB_ID, 11, 580, 885, "?isS3=1"))
    assert r.status_code == 503, r.text
    error = assert_error(r.json(), "unavailable")
    assert "cannot connect" in error["message"]
    assert "127.0.0.1" not in error["message"]  # no internal address in a user's answer


def test_missing_bucket_is_a_503_naming_it(s3_settings: Settings) -> None:
    nobucket = s3_settings.model_copy(update={"s3_bucket": "no-such-bucket"})
    with admin_client(create_app(nobucket), raise_server_exceptions=False) as client:
        r = client.get(tile_url(RGB_ID, 11, 580, 883, "?isS3=1"))
    assert r.status_code == 503, r.text
    assert "'no-such-bucket' does not exist" in assert_error(r.json(), "unavailable")["message"]


def test_not_configured_is_a_503(settings: Settings) -> None:
    assert tile_stores(settings).s3 is None
    with pytest.raises(UnavailableError, match="not configured"):
        s3_store(settings)


def test_s3_keys_go_together() -> None:
    with pytest.raises(ValueError, match="or neither"):
        Settings(s3_access_key_id="a", _env_file=None)  # type: ignore[call-arg]
    # blank means unset, so an empty variable does not configure object storage
    assert Settings(s3_endpoint_url=" ", _env_file=None).s3.endpoint_url is None  # type: ignore[call-arg]


def test_refused_access_is_a_503_not_a_boto_error(s3_url: str) -> None:
    with S3TileStore(endpoint_url=s3_url, bucket=BUCKET, **plain_keys()) as store:
        with Stubber(store._client) as stub:
            stub.add_client_error("get_object", "InvalidAccessKeyId", http_status_code=403)
            with pytest.raises(UnavailableError, match=r"access refused \(InvalidAccessKeyId\)"):
                store.get("x/en/1/0/0.png")
