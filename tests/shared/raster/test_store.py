"""The raster stores: a folder, and a bucket (moto in server mode); GDAL's environment."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from shared.base.s3 import s3_client
from shared.errors import ConflictError, InvalidInputError, NotFoundError, UnavailableError
from shared.raster.store import (
    FileRasterStore,
    S3RasterStore,
    StoredItem,
    raster_store,
    set_gdal_environment,
)
from shared.settings import Settings
from tests.conftest import free_port
from tests.s3 import moto_thread, raw

BUCKET = "mapsvc-test-store"
KEYS = {"s3_access_key_id": SecretStr("testing"), "s3_secret_access_key": SecretStr("testing")}


def s3_settings(endpoint: str, tmp_path: Path, **more: Any) -> Settings:
    values: dict[str, Any] = {
        "work_dir": tmp_path,
        "raster_store": "s3",
        "raster_s3_bucket": BUCKET,
        "raster_s3_prefix": "/rasters/",
        "s3_endpoint_url": endpoint,
        **KEYS,
        **more,
    }
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


# -- the GDAL environment --------------------------------------------------------------------


def test_gdal_environment_of_a_bucket(tmp_path: Path) -> None:
    environ = {"GDAL_HTTP_TIMEOUT": "5", "CPL_VSIL_CURL_NON_CACHED": "/vsis3/other/"}
    settings = s3_settings("http://127.0.0.1:9000", tmp_path)
    set_gdal_environment(settings, environ)
    set_gdal_environment(settings, environ)  # twice: the same
    assert environ == {
        "AWS_S3_ENDPOINT": "127.0.0.1:9000",
        "AWS_HTTPS": "NO",
        "AWS_REGION": "us-east-1",
        "AWS_VIRTUAL_HOSTING": "FALSE",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        # never cached: an object replaced under its key is read again
        "CPL_VSIL_CURL_NON_CACHED": f"/vsis3/other/:/vsis3/{BUCKET}/rasters/",
        "GDAL_HTTP_TIMEOUT": "5",  # the user's
        "GDAL_HTTP_CONNECTTIMEOUT": "3",
    }


def test_gdal_environment_of_aws_without_keys(tmp_path: Path) -> None:
    environ: dict[str, str] = {}
    settings = Settings(  # type: ignore[call-arg]
        work_dir=tmp_path,
        raster_store="s3",
        s3_endpoint_url="https://s3.eu-central-1.amazonaws.com",
        s3_region="eu-central-1",
        s3_addressing_style="auto",
        _env_file=None,
    )
    set_gdal_environment(settings, environ)
    assert environ["AWS_S3_ENDPOINT"] == "s3.eu-central-1.amazonaws.com"
    assert environ["AWS_HTTPS"] == "YES"
    assert environ["AWS_REGION"] == "eu-central-1"
    assert environ["CPL_VSIL_CURL_NON_CACHED"] == "/vsis3/mapsvc-rasters/"
    # GDAL's own choices: its virtual hosting default, its credential chain (a role, ~/.aws)
    assert not {"AWS_VIRTUAL_HOSTING", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} & set(environ)


def test_the_file_store_sets_nothing(tmp_path: Path) -> None:
    environ: dict[str, str] = {}
    settings = Settings(work_dir=tmp_path, s3_endpoint_url="http://x:1", _env_file=None)  # type: ignore[call-arg]
    set_gdal_environment(settings, environ)
    assert environ == {}
    assert isinstance(raster_store(settings), FileRasterStore)


def test_a_bucket_store_needs_an_endpoint() -> None:
    with pytest.raises(ValidationError, match="MAPSVC_RASTER_STORE=s3 reads the rasters at"):
        Settings(raster_store="s3", _env_file=None)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        Settings(raster_store="ftp", _env_file=None)  # type: ignore[call-arg]


# -- the folder ------------------------------------------------------------------------------


def write_and_fail(writing: AbstractContextManager[Path]) -> None:
    """Write half a file, then fail (a cancelled job, a GDAL error)."""
    with writing as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("stopped")


@pytest.fixture
def folder(tmp_path: Path) -> FileRasterStore:
    root = tmp_path / "raster"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x.tif").write_bytes(b"II*\x00 tiff")
    (root / "a" / "to-x.tif").symlink_to("x.tif")
    (root / "a" / "out").symlink_to(tmp_path)
    (root / "a" / "broken").symlink_to("nowhere")
    os.mkfifo(root / "a" / "pipe.tif")
    return FileRasterStore(root)


def test_folder_items_and_children(folder: FileRasterStore) -> None:
    x = folder.item("a/x.tif")
    assert (x.rel_path, x.name, x.is_dir, x.size) == ("a/x.tif", "x.tif", False, 9)
    assert x.gdal_path == str(folder.root.resolve() / "a" / "x.tif")
    assert x.version == (folder.root / "a" / "x.tif").stat().st_mtime_ns
    children = {c.name: c for c in folder.children("./a/")}
    # a link leading outside, or nowhere, is not there; one inside is listed by its target
    assert set(children) == {"x.tif", "to-x.tif", "pipe.tif"}
    assert children["to-x.tif"].rel_path == "a/x.tif"
    assert folder.head(children["x.tif"], 4) == b"II*\x00"
    assert folder.head(children["pipe.tif"], 4) == b""  # never blocks on a FIFO
    assert folder.local_files([x], Path("/unused")) == [Path(x.gdal_path)]
    with pytest.raises(InvalidInputError, match="leads outside"):
        folder.item("a/out")
    with pytest.raises(InvalidInputError, match="is not a folder"):
        folder.children("a/x.tif")
    with pytest.raises(NotFoundError):
        folder.item("a/nope.tif")


def test_folder_writing_is_atomic(folder: FileRasterStore) -> None:
    with folder.writing("a/commpress/y.tif") as tmp:
        tmp.write_bytes(b"done")
        assert not (folder.root / "a" / "commpress" / "y.tif").exists()
    assert (folder.root / "a" / "commpress" / "y.tif").read_bytes() == b"done"
    with pytest.raises(RuntimeError, match="stopped"):
        write_and_fail(folder.writing("a/commpress/z.tif"))
    assert sorted(p.name for p in (folder.root / "a" / "commpress").iterdir()) == ["y.tif"]


# -- the bucket ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    """moto in a thread: these calls are boto3's only (GDAL reads are tested through the API)."""
    with moto_thread(BUCKET) as url:
        yield url


@pytest.fixture
def bucket(s3_url: str, tmp_path: Path) -> Iterator[S3RasterStore]:
    """A store under a prefix of its own, holding ``a/x.tif``, ``a/b/y.tif`` and a marker."""
    prefix = f"t{tmp_path.name}"
    client = raw(s3_url)
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/a/x.tif", Body=b"II*\x00 tiff")
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/a/b/y.tif", Body=b"MM\x00* tiff")
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/a/", Body=b"")  # the folder's marker
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/empty.tif", Body=b"")
    client.put_object(Bucket=BUCKET, Key=f"{prefix}x/outside.tif", Body=b"II*\x00")
    store = raster_store(s3_settings(s3_url, tmp_path, raster_s3_prefix=prefix))
    assert isinstance(store, S3RasterStore)
    with store:
        yield store


def test_bucket_items(bucket: S3RasterStore) -> None:
    x = bucket.item("a/x.tif")
    assert (x.rel_path, x.name, x.is_dir, x.size) == ("a/x.tif", "x.tif", False, 9)
    assert x.gdal_path == f"/vsis3/{BUCKET}/{bucket.prefix}a/x.tif"
    assert x.gdal_path == f"{bucket.gdal_root}/a/x.tif"
    assert str(x.version).startswith('"')  # the ETag
    a = bucket.item("./a//")
    assert (a.rel_path, a.is_dir, a.size) == ("a", True, None)
    assert a.created == a.modified == x.modified  # its one object's time
    assert bucket.item("").is_dir
    for missing in ("a/nope.tif", "nope", "a/x"):
        with pytest.raises(NotFoundError, match="in the raster folder"):
            bucket.item(missing)
    for bad in ("../x", "/etc/passwd", "a\\b", "a/../../x", "a\x00b"):
        with pytest.raises(InvalidInputError):
            bucket.item(bad)


def test_bucket_folder_version_follows_its_objects(bucket: S3RasterStore, s3_url: str) -> None:
    before = bucket.item("a").version
    raw(s3_url).put_object(Bucket=BUCKET, Key=f"{bucket.prefix}a/z.tif", Body=b"II*\x00")
    assert bucket.item("a").version != before


def test_bucket_children(bucket: S3RasterStore) -> None:
    root = {(c.name, c.is_dir) for c in bucket.children("")}
    assert root == {("a", True), ("empty.tif", False)}  # not the keys of another prefix
    children = {c.name: c for c in bucket.children("a")}
    assert set(children) == {"b", "x.tif"}  # not the marker
    assert children["b"].rel_path == "a/b"
    assert children["b"].is_dir
    assert bucket.head(children["x.tif"], 4) == b"II*\x00"
    assert bucket.head(bucket.item("empty.tif"), 4) == b""
    with pytest.raises(InvalidInputError, match="is not a folder"):
        bucket.children("a/x.tif")
    with pytest.raises(NotFoundError):
        bucket.children("nope")


def test_bucket_file_sizes(bucket: S3RasterStore, tmp_path: Path) -> None:
    assert bucket.file_size(bucket.item("a/b/y.tif").gdal_path) == 9
    with pytest.raises(FileNotFoundError):
        bucket.file_size(f"{bucket.gdal_root}/a/x.tif.ovr")
    local = tmp_path / "local.vrt"
    local.write_text("<VRTDataset/>")
    assert bucket.file_size(str(local)) == 13


def test_bucket_writing_uploads_whole_files_only(bucket: S3RasterStore, s3_url: str) -> None:
    with bucket.writing("a/commpress/x.tif") as tmp:
        tmp.write_bytes(b"compressed")
        assert tmp.parent == bucket.staging
        with pytest.raises(NotFoundError):  # nothing under the final key before the end
            bucket.item("a/commpress/x.tif")
    got = raw(s3_url).get_object(Bucket=BUCKET, Key=f"{bucket.prefix}a/commpress/x.tif")
    assert got["Body"].read() == b"compressed"
    with pytest.raises(RuntimeError, match="stopped"):
        write_and_fail(bucket.writing("a/commpress/half.tif"))
    with pytest.raises(NotFoundError):
        bucket.item("a/commpress/half.tif")
    assert list(bucket.staging.iterdir()) == []
    with pytest.raises(InvalidInputError), bucket.writing(""):
        pass


def test_bucket_local_copies(bucket: S3RasterStore, s3_url: str, tmp_path: Path) -> None:
    x, y = bucket.item("a/x.tif"), bucket.item("a/b/y.tif")
    copies = bucket.local_files([x, y], tmp_path / "copies")
    assert [p.name for p in copies] == ["x.tif", "y.tif"]
    assert copies[0].read_bytes() == b"II*\x00 tiff"
    # a copy in place is kept (it is only ever written whole)
    raw(s3_url).delete_object(Bucket=BUCKET, Key=f"{bucket.prefix}a/x.tif")
    assert bucket.local_files([x], tmp_path / "copies") == copies[:1]
    with pytest.raises(NotFoundError, match="gone from the bucket"):
        bucket.local_files([x], tmp_path / "again")
    # an object replaced since it was listed is not copied in its new version
    raw(s3_url).put_object(Bucket=BUCKET, Key=f"{bucket.prefix}a/b/y.tif", Body=b"MM\x00* new")
    with pytest.raises(ConflictError, match="changed in the bucket"):
        bucket.local_files([y], tmp_path / "again")
    assert list((tmp_path / "again").iterdir()) == []


def test_bucket_down_is_unavailable(tmp_path: Path) -> None:
    store = S3RasterStore(
        s3_client(
            endpoint_url=f"http://127.0.0.1:{free_port()}",
            region="us-east-1",
            access_key_id="testing",
            secret_access_key="testing",
            addressing_style="path",
        ),
        bucket=BUCKET,
        prefix="",
        staging=tmp_path,
    )
    with store, pytest.raises(UnavailableError, match="cannot connect"):
        store.item("a/x.tif")


def test_stored_item_names() -> None:
    item = StoredItem("a/RGB.byte.tif", "RGB.byte.tif", "/x", False, 1, 0.0, 0.0, 7)
    assert item.stem == "RGB.byte"
    assert item.signature == ("/x", 1, 7)
