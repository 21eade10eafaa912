"""WMTS and WMS read by programs nobody here wrote: GDAL (``WMTS:``, ``WMS:``) and OWSLib.

Each reads the capabilities with a key in their URL (every URL in them carries it), then
draws a window of the Landsat scene whose pixels are the ``rtile`` tile's or BBOX render's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import rasterio
import redis
from owslib.wms import WebMapService  # type: ignore[import-untyped]
from owslib.wmts import WebMapTileService  # type: ignore[import-untyped]

from shared.base.grid import TileAddress
from shared.settings import Settings
from tests.conftest import served
from tests.interop.gdal import reader_key, run
from tests.layers import RGB, RGB_ID, configure, decode, tile_url

#: a tile of the scene, inside it
TILE = TileAddress(8, 72, 110)


@pytest.fixture(scope="module")
def server(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> Iterator[str]:
    """A real server with the scene configured (private)."""
    configure(settings, rdb, RGB)
    with served(settings) as base:
        yield base


@pytest.fixture(scope="module")
def key(server: str) -> str:
    """A reader's key limited to the scene."""
    return reader_key(server, "ows", [RGB_ID])


def tile_pixels(server: str, key: str) -> np.ndarray:
    r = httpx.get(server + tile_url(RGB_ID, TILE.z, TILE.x, TILE.y, f"?api_key={key}"))
    assert r.status_code == 200, r.text
    return decode(r.content)


def window(source: str, out: Path, tile: TileAddress) -> np.ndarray:
    """``gdal_translate`` of ``tile``'s box (EPSG:3857) at 256 px: its RGB(A) pixels."""
    x0, y0, x1, y1 = tile.bounds_3857()
    box = [str(v) for v in (x0, y1, x1, y0)]
    run(
        "gdal_translate",
        "-q",
        "-projwin",
        *box,
        "-projwin_srs",
        "EPSG:3857",
        "-outsize",
        "256",
        "256",
        "-of",
        "GTiff",
        source,
        str(out),
    )
    with rasterio.open(out) as ds:
        pixels: np.ndarray = ds.read()
    return pixels


def test_gdal_reads_wmts(server: str, key: str, tmp_path: Path) -> None:
    caps = f"WMTS:{server}/api-user/wmts/1.0.0/WMTSCapabilities.xml?api_key={key}"
    info = run("gdalinfo", caps)
    assert 'EPSG",3857' in info or "Pseudo-Mercator" in info, info[:2000]
    expected = tile_pixels(server, key)
    pixels = window(caps, tmp_path / "wmts.tif", TILE)
    assert pixels.shape[1:] == (256, 256)
    assert np.array_equal(pixels[:3], expected[:3])


def test_gdal_reads_wms(server: str, key: str, tmp_path: Path) -> None:
    url = f"{server}/api-user/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetCapabilities&api_key={key}"
    info = run("gdalinfo", f"WMS:{url}")
    names = re.findall(r"SUBDATASET_\d+_NAME=(.*)", info)
    (subdataset,) = [name for name in names if RGB_ID in name]
    assert f"api_key={key}" in subdataset
    pixels = window(subdataset, tmp_path / "wms.tif", TILE).astype(float)
    expected = tile_pixels(server, key).astype(float)
    assert pixels.shape[1:] == (256, 256)
    drawn = expected[3] == 255
    assert drawn.mean() > 0.5  # the tile holds the edge of the scene
    # GDAL draws the window from its own blocks in EPSG:4326, resampled: near the tile
    assert np.abs(pixels[:3][:, drawn] - expected[:3][:, drawn]).mean() < 12


def test_owslib_reads_wms_and_wmts(server: str, key: str) -> None:
    wms = WebMapService(f"{server}/api-user/wms?api_key={key}", version="1.3.0")
    assert list(wms.contents) == [RGB_ID]
    x0, y0, x1, y1 = TILE.bounds_3857()
    image = wms.getmap(
        layers=[RGB_ID],
        styles=[""],
        srs="EPSG:3857",
        bbox=(x0, y0, x1, y1),
        size=(256, 256),
        format="image/png",
        transparent=True,
    )
    expected = tile_pixels(server, key)
    assert np.array_equal(decode(image.read()), expected)
    wmts = WebMapTileService(
        f"{server}/api-user/wmts?SERVICE=WMTS&REQUEST=GetCapabilities&api_key={key}"
    )
    assert list(wmts.contents) == [RGB_ID]
    assert "GoogleMapsCompatible" in wmts.tilematrixsets
    tile = wmts.gettile(
        layer=RGB_ID,
        tilematrixset="GoogleMapsCompatible",
        tilematrix=str(TILE.z),
        row=TILE.y,
        column=TILE.x,
        format="image/png",
    )
    assert np.array_equal(decode(tile.read()), expected)
