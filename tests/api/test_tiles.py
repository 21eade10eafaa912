"""Tiles from real rasters: pixels against rasterio, seams, footprint, cache, ETag, errors."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import rasterio
import redis
from rasterio.warp import transform_bounds
from starlette.testclient import TestClient

from api.app import create_app
from shared.base.grid import TileAddress
from shared.base.png import transparent_png
from shared.raster.paths import encode_id
from shared.settings import Settings
from tests.checks import assert_error
from tests.conftest import ROOT, admin_client, run_mapsvc
from tests.layers import MOSAIC_ID, RGB, RGB_ID, configure, decode, reference, tile_url


@pytest.fixture(scope="module")
def tc(settings: Settings, layers: None) -> Iterator[TestClient]:
    """One app (and one render pool) for the module."""
    with admin_client(create_app(settings), raise_server_exceptions=False) as client:
        yield client


@pytest.mark.parametrize(("z", "x", "y"), [(10, 290, 442), (11, 580, 884), (11, 581, 879)])
def test_tile_matches_rasterio(tc: TestClient, raster_dir: Path, z: int, x: int, y: int) -> None:
    r = tc.get(tile_url(RGB_ID, z, x, y, "?nocache=1"))
    assert r.status_code == 200
    assert r.headers["content-type"] == "image/png"
    image = decode(r.content)
    assert image.shape == (4, 256, 256)
    ref = reference(raster_dir / RGB, TileAddress(z, x, y))
    valid = (image[3] == 255) & (ref.sum(axis=0) > 0)
    assert valid.mean() > 0.2
    error = np.abs(image[:3].astype(int) - ref.astype(int))[:, valid]
    assert error.mean() < 6, error.mean()
    # nodata respected: where the scene has no data the tile is transparent
    assert ((image[3] > 0) & (ref.sum(axis=0) == 0)).mean() < 0.02


def test_folder_layer_has_no_seams(tc: TestClient) -> None:
    # tiles across the borders of the four files equal the tiles of the whole scene
    for z, x, y in [(9, 145, 219), (10, 290, 439), (11, 581, 879), (11, 580, 884)]:
        mosaic = decode(tc.get(tile_url(MOSAIC_ID, z, x, y, "?nocache=1")).content)
        whole = decode(tc.get(tile_url(RGB_ID, z, x, y, "?nocache=1")).content)
        assert np.abs(mosaic.astype(int) - whole.astype(int)).max() <= 1, (z, x, y)


def test_tile_outside_the_footprint_is_empty_without_rendering(tc: TestClient) -> None:
    before = tc.app.state.services.tiles.renders  # type: ignore[attr-defined]
    r = tc.get(tile_url(RGB_ID, 8, 0, 0))
    assert r.status_code == 200
    assert r.content == transparent_png()
    assert r.headers["x-tile-empty"] == "1"
    assert decode(r.content)[3].max() == 0
    assert tc.app.state.services.tiles.renders == before  # type: ignore[attr-defined]


def test_tile_at_the_footprint_edge_is_transparent_outside(
    tc: TestClient, raster_dir: Path
) -> None:
    tile = TileAddress(9, 146, 220)  # the edge of the scene crosses it
    image = decode(tc.get(tile_url(RGB_ID, tile.z, tile.x, tile.y, "?nocache=1")).content)
    outside = reference(raster_dir / RGB, tile).sum(axis=0) == 0
    assert 0.2 < outside.mean() < 0.8
    assert (image[3][outside] == 0).mean() > 0.98
    assert (image[3][~outside] == 255).mean() > 0.98


@pytest.fixture
def public_tc(settings: Settings, layers: None) -> Iterator[TestClient]:
    """The API with the scene a public layer (``MAPSVC_PUBLIC_LAYERS``), as every layer was
    before credentials: its tiles may be kept by shared caches (``Cache-Control: public``)."""
    public = settings.model_copy(update={"public_layers": (RGB_ID,)})
    with admin_client(create_app(public), raise_server_exceptions=False) as client:
        yield client


def test_cache_hit_etag_and_304(public_tc: TestClient, settings: Settings) -> None:
    tc = public_tc
    url = tile_url(RGB_ID, 10, 290, 442)
    stored = settings.dirs.rtile / RGB_ID / "en" / "10" / "290" / "442.png"
    stored.unlink(missing_ok=True)  # other modules of the session may have asked this tile
    first = tc.get(url)
    assert first.status_code == 200
    assert first.headers["x-cache"] == "MISS"
    assert stored.read_bytes() == first.content
    second = tc.get(url)
    assert second.headers["x-cache"] == "HIT"
    assert second.content == first.content
    assert second.headers["etag"] == first.headers["etag"]
    assert second.headers["cache-control"] == "public, max-age=3600"
    not_modified = tc.get(url, headers={"If-None-Match": first.headers["etag"]})
    assert not_modified.status_code == 304
    assert not_modified.content == b""
    assert not_modified.headers["x-cache"] == "HIT"
    # the form without the lang segment (language from ?lang=, else the default) shares it
    bare = tc.get(f"/api-user/rtile/{RGB_ID}/10/290/442.png")
    assert bare.headers["x-cache"] == "HIT"
    assert bare.content == first.content
    assert tc.get(f"/api/v1/rtile/{RGB_ID}/10/290/442.png?lang=en").headers["x-cache"] == "HIT"


def test_nocache_renders_and_stores_nothing(tc: TestClient, settings: Settings) -> None:
    r = tc.get(tile_url(RGB_ID, 10, 291, 440, "?nocache=1"))
    assert r.headers["x-cache"] == "MISS"
    assert decode(r.content)[3].max() == 255
    assert not (settings.dirs.rtile / RGB_ID / "en" / "10" / "291").exists()


def test_concurrent_requests_render_a_tile_once(tc: TestClient) -> None:
    before = tc.app.state.services.tiles.renders  # type: ignore[attr-defined]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: tc.get(tile_url(RGB_ID, 11, 582, 880)), range(8)))
    assert {a.status_code for a in answers} == {200}
    assert len({a.content for a in answers}) == 1
    assert tc.app.state.services.tiles.renders == before + 1  # type: ignore[attr-defined]


def test_bbox_render(tc: TestClient, raster_dir: Path) -> None:
    with rasterio.open(raster_dir / RGB) as ds:
        merc = transform_bounds(ds.crs, "EPSG:3857", *ds.bounds)
        lonlat = transform_bounds(ds.crs, "EPSG:4326", *ds.bounds)
    r = tc.get(
        f"/api-user/rtile/{RGB_ID}/0/0/0.png",
        params={"BBOX": ",".join(map(str, merc)), "width": 400, "height": 300},
    )
    assert r.status_code == 200
    image = decode(r.content)
    assert image.shape == (4, 300, 400)
    assert (image[3] == 255).mean() > 0.5
    degrees = tc.get(
        f"/api-user/rtile/{RGB_ID}/0/0/0.png",
        params={
            "bbox": ",".join(map(str, lonlat)),
            "width": 400,
            "height": 300,
            "srs": "EPSG:4326",
        },
    )
    assert degrees.status_code == 200
    assert (decode(degrees.content)[3] == 255).mean() > 0.5


def test_debug_gives_bbound_and_a_command_that_renders_the_same_png(
    tc: TestClient, settings: Settings, tmp_path: Path
) -> None:
    z, x, y = 10, 290, 442
    body = tc.get(tile_url(RGB_ID, z, x, y, "?debug=1")).json()
    assert set(body) == {"bbound", "cmd"}
    expected = transform_bounds("EPSG:3857", "EPSG:32618", *TileAddress(z, x, y).bounds_3857())
    assert body["bbound"] == pytest.approx(list(expected), abs=0.01)
    argv = body["cmd"].split()
    assert argv[:2] == ["mapsvc", "render-tile"]
    run_mapsvc(settings, *argv[1:], cwd=tmp_path, check=True)
    written = (tmp_path / argv[-1]).read_bytes()
    assert written == tc.get(tile_url(RGB_ID, z, x, y, "?nocache=1")).content
    assert (ROOT / "api" / "cli.py").is_file()


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        (f"/api-user/rtile/{RGB_ID}/en/25/0/0.png", 400, "invalid-input"),
        (f"/api-user/rtile/{RGB_ID}/en/3/8/0.png", 404, "not-found"),  # columns 0..7 at z3
        (f"/api-user/rtile/{RGB_ID}/en/3/0/-1.png", 400, "invalid-input"),
        (f"/api-user/rtile/{RGB_ID}/en/z/0/0.png", 400, "invalid-input"),
        (f"/api-user/rtile/{RGB_ID}/en/1.5/0/0.png", 400, "invalid-input"),
        (f"/api-user/rtile/{RGB_ID}/e!/3/0/0.png", 400, "invalid-input"),
        (f"/api-user/rtile/{RGB_ID}/3/0/0.png?lang=xx_yy", 400, "invalid-input"),
        (f"/api-user/rtile/{encode_id('nope.tif')}/en/3/0/0.png", 404, "not-found"),
        ("/api-user/rtile/a.b/en/3/0/0.png", 400, "invalid-input"),
        (f"/api-user/rtile/{RGB_ID}/en/3/0/0.png?bbox=1,2,3", 400, "invalid-input"),
        (f"/api-user/rtile/{RGB_ID}/en/3/0/0.png?bbox=0,0,1,1&width=-5", 400, "invalid-input"),
        (f"/api-user/rtile/{RGB_ID}/en/3/0/0.png?bbox=0,0,1,1&width=99999", 400, "invalid-input"),
        (
            f"/api-user/rtile/{RGB_ID}/en/3/0/0.png?bbox=0,0,1,1&srs=EPSG:99999",
            400,
            "invalid-input",
        ),
        (f"/api-user/rtile/{RGB_ID}/en/3/0/0.png?isS3=1", 503, "unavailable"),
        # the front's access route: a name that is no style, a style that does not exist
        ("/api-user/rtile/a.b/access", 400, "invalid-input"),
        (f"/api-user/rtile/{'x' * 300}/access", 400, "invalid-input"),
        (f"/api-user/rtile/{encode_id('nope.tif')}/access", 404, "not-found"),
    ],
)
def test_bad_tile_requests(tc: TestClient, path: str, status: int, code: str) -> None:
    r = tc.get(path)
    assert r.status_code == status, r.text
    assert_error(r.json(), code)


def test_vanished_raster_gives_a_clear_error_and_caches_nothing(
    tc: TestClient, settings: Settings, rdb: redis.Redis, raster_dir: Path
) -> None:
    (raster_dir / "gone").mkdir(exist_ok=True)
    shutil.copyfile(raster_dir / RGB, raster_dir / "gone" / "scene.tif")
    style = configure(settings, rdb, "gone/scene.tif")
    assert tc.get(tile_url(style, 10, 290, 442, "?nocache=1")).status_code == 200
    (raster_dir / "gone" / "scene.tif").unlink()
    r = tc.get(tile_url(style, 10, 290, 441))
    assert r.status_code == 422
    assert "gone" in assert_error(r.json(), "unprocessable")["message"]
    assert not (settings.dirs.rtile / style / "en" / "10").exists()
