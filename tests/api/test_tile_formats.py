"""Tiles as WebP and JPEG and at ``@2x``: pixels against rasterio, cache files, headers, S3."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import rasterio
import redis
from rasterio.warp import transform_bounds
from starlette.testclient import TestClient

from api.app import create_app
from shared.base.grid import TileAddress
from shared.settings import Settings
from shared.tiles.stores import s3_store
from tests.api.test_tiles_s3 import BUCKET, s3_url  # noqa: F401 - s3_url
from tests.checks import assert_error
from tests.conftest import admin_client
from tests.layers import RGB, configure, decode, reference, tile_url
from tests.s3 import KEYS, keys, raw

#: the variants besides the 256 px PNG: URL suffix, media type, pixels a side, lossy
VARIANTS = [
    (".webp", "image/webp", 256, True),
    (".jpg", "image/jpeg", 256, True),
    ("@2x.png", "image/png", 512, False),
    ("@2x.webp", "image/webp", 512, True),
    ("@2x.jpg", "image/jpeg", 512, True),
]
SUFFIXES = [".png", *(v[0] for v in VARIANTS)]


@pytest.fixture(scope="module")
def style(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> str:
    """The Landsat scene as a layer of this module's own, so that its tile folder is ours."""
    (raster_dir / "formats").mkdir(exist_ok=True)
    shutil.copyfile(raster_dir / RGB, raster_dir / "formats" / "landsat.tif")
    return configure(settings, rdb, "formats/landsat.tif")


@pytest.fixture(scope="module")
def tc(settings: Settings, style: str) -> Iterator[TestClient]:
    """The API with the default encodings (lossy WebP)."""
    with admin_client(create_app(settings), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture(scope="module")
def lossless_tc(settings: Settings, style: str) -> Iterator[TestClient]:
    """The API with ``MAPSVC_WEBP_LOSSLESS=true``."""
    lossless = settings.model_copy(update={"webp_lossless": True})
    with admin_client(create_app(lossless), raise_server_exceptions=False) as client:
        yield client


def rgba(pixels: np.ndarray) -> np.ndarray:
    """``pixels`` with an alpha band (libwebp leaves it out of an image that is all opaque)."""
    if pixels.shape[0] == 4:
        return pixels
    return np.concatenate([pixels, np.full((1, *pixels.shape[1:]), 255, np.uint8)])


def renders(tc: TestClient) -> int:
    return int(tc.app.state.services.tiles.renders)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("suffix", "media_type", "size", "lossy"), VARIANTS)
@pytest.mark.parametrize(("z", "x", "y"), [(10, 290, 442), (11, 580, 884)])
def test_tile_matches_rasterio(
    tc: TestClient,
    style: str,
    raster_dir: Path,
    suffix: str,
    media_type: str,
    size: int,
    lossy: bool,
    z: int,
    x: int,
    y: int,
) -> None:
    r = tc.get(tile_url(style, z, x, y, "?nocache=1", suffix))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == media_type
    image = decode(r.content)
    assert image.shape[1:] == (size, size)
    ref = reference(raster_dir / RGB, TileAddress(z, x, y), size)
    data, nodata = ref.sum(axis=0) > 0, ref.sum(axis=0) == 0
    opaque = rgba(image)[3] == 255
    valid = data & opaque
    assert valid.mean() > 0.2
    error = np.abs(image[:3].astype(int) - ref.astype(int))[:, valid]
    assert error.mean() < (8 if lossy else 6), error.mean()
    if media_type == "image/jpeg":  # no alpha: white where the scene has no data
        assert image.shape[0] == 3
        assert (image[:, nodata] >= 240).all(axis=0).mean() > 0.85
    else:
        assert (~opaque[nodata]).mean() > 0.9
        assert (rgba(image)[3][nodata] > 0).mean() < 0.1


@pytest.mark.parametrize(("z", "x", "y"), [(10, 290, 442), (11, 580, 884), (11, 581, 879)])
def test_lossless_webp_has_the_pngs_pixels_and_a_quarter_fewer_bytes(
    lossless_tc: TestClient, style: str, z: int, x: int, y: int
) -> None:
    png = lossless_tc.get(tile_url(style, z, x, y, "?nocache=1"))
    webp = lossless_tc.get(tile_url(style, z, x, y, "?nocache=1", ".webp"))
    assert webp.headers["content-type"] == "image/webp"
    png_pixels, webp_pixels = decode(png.content), rgba(decode(webp.content))
    assert (webp_pixels[3] == png_pixels[3]).all()
    drawn = png_pixels[3] > 0  # under alpha 0 the colour is free
    assert (webp_pixels[:3, drawn] == png_pixels[:3, drawn]).all()
    # the aim; measured 33-46% smaller on the scene's tiles of zooms 8-12
    assert len(webp.content) < 0.75 * len(png.content), (len(webp.content), len(png.content))


def test_lossy_formats_are_smaller_still(tc: TestClient, style: str) -> None:
    sizes = {
        suffix: len(tc.get(tile_url(style, 11, 580, 884, "?nocache=1", suffix)).content)
        for suffix in (".png", ".webp", ".jpg")
    }
    assert sizes[".webp"] < sizes[".jpg"] < sizes[".png"] / 3, sizes


def test_each_variant_is_cached_apart_beside_the_png(
    tc: TestClient, settings: Settings, style: str
) -> None:
    z, x, y = 11, 581, 880
    folder = settings.dirs.rtile / style / "en" / str(z) / str(x)
    shutil.rmtree(folder, ignore_errors=True)
    etags = set()
    for suffix in SUFFIXES:
        url = tile_url(style, z, x, y, suffix=suffix)
        first = tc.get(url)
        assert first.status_code == 200, (suffix, first.text)
        assert first.headers["x-cache"] == "MISS", suffix
        # the tile the cache serves is the one rendered, byte for byte
        assert (folder / f"{y}{suffix}").read_bytes() == first.content
        second = tc.get(url)
        assert second.headers["x-cache"] == "HIT", suffix
        assert second.content == first.content
        assert second.headers["content-type"] == first.headers["content-type"]
        assert second.headers["etag"] == first.headers["etag"]
        not_modified = tc.get(url, headers={"If-None-Match": first.headers["etag"]})
        assert not_modified.status_code == 304
        assert not_modified.content == b""
        assert not_modified.headers["x-cache"] == "HIT"
        etags.add(first.headers["etag"])
    assert len(etags) == len(SUFFIXES)  # one ETag per format and scale
    assert {p.name for p in folder.iterdir()} == {f"{y}{suffix}" for suffix in SUFFIXES}
    # `.jpeg` is `.jpg`: one cached file
    jpeg = tc.get(tile_url(style, z, x, y, suffix="@2x.jpeg"))
    assert jpeg.headers["x-cache"] == "HIT"
    assert jpeg.content == (folder / f"{y}@2x.jpg").read_bytes()
    # the form without the lang segment, and the other mount, share the cache
    for base in ("/api-user", "/api/v1"):
        bare = tc.get(f"{base}/rtile/{style}/{z}/{x}/{y}@2x.webp?lang=en")
        assert bare.headers["x-cache"] == "HIT"
        assert bare.content == (folder / f"{y}@2x.webp").read_bytes()
        assert tc.get(f"{base}/rtile/{style}/{z}/{x}/{y}@2x.png").headers["x-cache"] == "HIT"


def test_head_answers_the_headers_and_304(tc: TestClient, style: str) -> None:
    url = tile_url(style, 11, 581, 881, suffix=".webp")
    got = tc.get(url)
    head = tc.head(url)
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-type"] == "image/webp"
    assert head.headers["etag"] == got.headers["etag"]
    assert tc.head(url, headers={"If-None-Match": got.headers["etag"]}).status_code == 304


@pytest.mark.parametrize("suffix", [".webp", ".jpg", "@2x.png"])
def test_nocache_renders_and_stores_nothing(
    tc: TestClient, settings: Settings, style: str, suffix: str
) -> None:
    before = renders(tc)
    r = tc.get(tile_url(style, 10, 291, 440, "?nocache=1", suffix))
    assert r.status_code == 200
    assert r.headers["x-cache"] == "MISS"
    assert rgba(decode(r.content))[:3].any()
    assert renders(tc) == before  # renders counts the tiles rendered for the cache
    assert not (settings.dirs.rtile / style / "en" / "10" / "291").exists()


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_outside_the_footprint_is_an_empty_tile_of_the_format(
    tc: TestClient, style: str, suffix: str
) -> None:
    before = renders(tc)
    r = tc.get(tile_url(style, 8, 0, 0, suffix=suffix))
    assert r.status_code == 200
    assert r.headers["x-tile-empty"] == "1"
    pixels = decode(r.content)
    side = 512 if suffix.startswith("@2x") else 256
    assert pixels.shape[1:] == (side, side)
    if suffix.endswith(".jpg"):
        assert r.headers["content-type"] == "image/jpeg"
        assert (pixels == 255).all()  # the JPEG background: white
    else:
        assert r.headers["content-type"] == f"image/{suffix.rpartition('.')[2]}"
        assert not pixels[3].any()
    assert renders(tc) == before


def test_bbox_render_in_a_format_and_at_2x(tc: TestClient, style: str, raster_dir: Path) -> None:
    with rasterio.open(raster_dir / RGB) as ds:
        merc = transform_bounds(ds.crs, "EPSG:3857", *ds.bounds)
    params = {"BBOX": ",".join(map(str, merc)), "width": 300, "height": 200}
    webp = tc.get(f"/api-user/rtile/{style}/0/0/0.webp", params=params)
    assert webp.headers["content-type"] == "image/webp"
    assert rgba(decode(webp.content)).shape == (4, 200, 300)
    retina = tc.get(f"/api-user/rtile/{style}/en/0/0/0@2x.jpg", params=params)
    assert retina.headers["content-type"] == "image/jpeg"
    assert decode(retina.content).shape == (3, 400, 600)
    too_wide = tc.get(f"/api-user/rtile/{style}/0/0/0@2x.png", params={**params, "width": 4096})
    assert too_wide.status_code == 400
    assert assert_error(too_wide.json(), "invalid-input")["detail"]["parameter"] == "width"


@pytest.mark.parametrize(
    ("name", "parameter"),
    [
        ("0.gif", "format"),
        ("0.PNG", "format"),
        ("0.webp.gz", "format"),
        ("0.jpeg@2x", "format"),
        ("0@3x.png", "y"),
        ("0@2x@2x.webp", "y"),
        ("x@2x.webp", "y"),
    ],
)
def test_bad_tile_names(tc: TestClient, style: str, name: str, parameter: str) -> None:
    r = tc.get(f"/api-user/rtile/{style}/en/3/0/{name}")
    assert r.status_code == 400, r.text
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == parameter


def test_a_tile_past_the_grid_does_not_exist(tc: TestClient, style: str) -> None:
    r = tc.get(f"/api-user/rtile/{style}/en/3/0/8@2x.jpg")  # rows 0..7 at zoom 3
    assert r.status_code == 404, r.text
    assert assert_error(r.json(), "not-found")["detail"]["parameter"] == "y"


def test_s3_keeps_each_variant_under_its_key_with_its_type(
    settings: Settings,
    style: str,
    s3_url: str,  # noqa: F811 - the fixture of test_tiles_s3
) -> None:
    s3_settings = settings.model_copy(
        update={"s3_endpoint_url": s3_url, "s3_bucket": BUCKET, **KEYS}
    )
    with admin_client(create_app(s3_settings), raise_server_exceptions=False) as client:
        for suffix, media_type in [(".webp", "image/webp"), ("@2x.jpg", "image/jpeg")]:
            url = tile_url(style, 11, 580, 883, "?isS3=1", suffix)
            first = client.get(url)
            assert first.headers["x-cache"] == "MISS"
            key = f"{style}/en/11/580/883{suffix}"
            stored = raw(s3_url).get_object(Bucket=BUCKET, Key=key)
            assert stored["ContentType"] == media_type
            assert stored["Body"].read() == first.content
            second = client.get(url)
            assert (second.headers["x-cache"], second.content) == ("HIT", first.content)
    assert keys(s3_url, BUCKET, f"{style}/") == {
        f"{style}/en/11/580/883.webp",
        f"{style}/en/11/580/883@2x.jpg",
    }
    with s3_store(s3_settings) as store:
        store.drop_style(style)
    assert keys(s3_url, BUCKET, f"{style}/") == set()


@pytest.mark.worker
def test_pretile_makes_the_tiles_of_a_format_the_api_then_serves(
    tc: TestClient, settings: Settings, style: str, worker: subprocess.Popen[bytes]
) -> None:
    root = settings.dirs.rtile / style / "en"
    for z in ("8", "9"):
        shutil.rmtree(root / z, ignore_errors=True)
    r = tc.get(f"/api-user/gis-layer-pretile/{style}?minzoom=8&maxzoom=10&tile_format=webp@2x")
    assert r.status_code == 200, r.text
    assert [(z["zoom"], z["rendered"]) for z in r.json()["zooms"]] == [(8, 6), (9, 20)]
    made = sorted(root.glob("[89]/*/*"))
    assert len(made) == 26
    assert {p.name.partition("@")[2] for p in made} == {"2x.webp"}
    z, x, name = made[0].relative_to(root).parts
    served = tc.get(f"/api-user/rtile/{style}/en/{z}/{x}/{name}")
    assert (served.headers["x-cache"], served.content) == ("HIT", made[0].read_bytes())
    assert served.headers["content-type"] == "image/webp"
    assert decode(served.content).shape[1:] == (512, 512)


def test_pretile_refuses_an_unknown_format(tc: TestClient, style: str) -> None:
    r = tc.get(f"/api-user/gis-layer-pretile/{style}?dryrun=1&tile_format=gif")
    assert r.status_code == 400
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == "tile_format"
