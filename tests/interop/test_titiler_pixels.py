"""Our raster tiles against TiTiler's, drawn by TiTiler's own code: programs nobody here wrote.

TiTiler here is ``titiler.core``'s ``TilerFactory`` (its FastAPI tiler, in-process, its default
algorithms and colour maps) over rio-tiler's ``Reader``: its
``/tiles/WebMercatorQuad/{z}/{x}/{y}.png`` is given the very query our
``/api-user/rtile/…`` tile is given (``bidx``, ``rescale``, ``colormap_name``, ``expression``,
``algorithm``, ``resampling=nearest``), plus ``url`` (the file) and ``reproject=nearest`` (its
name for the warp's resampling; its ``resampling`` is that of its reads). Both read the same
synthetic COGs, whose overviews are made with AVERAGE (so that reading another level than
TiTiler's would show); the tiles are at the rasters' native zoom (11) and one coarser (10), some
crossing the rasters' edges and nodata corners (their transparency is compared too).

Tolerances, and what was measured (GDAL 3.10 in rasterio 1.4, rio-tiler 9.4, titiler.core 2.4):

- a stretch (``rescale``, ``bidx``): alpha identical; each channel ours − TiTiler's is 0 or 1
  (measured: 1 in 43 to 46 % of the opaque values, also for the scene in degrees, warped).
  TiTiler truncates the stretched value (rio-tiler's ``rescale_image`` writes it back into the
  source's array, then ``astype("uint8")``); we round it (``_stretch``, then ``np.round``, in
  ``shared/raster/draw.py``). Taking a neighbour's source pixel would differ by far more.
- a colour map (``rescale`` + ``colormap_name``, a band or an NDVI ``expression``): alpha
  identical; the colour is the same entry of the colour map, or the next one where the stretched
  value lies on a whole number (we stretch in float32, TiTiler in float64); measured: 1 or 2
  pixels of 65 536 in two tiles of six, none in the others.
- terrain-RGB and Terrarium: where both are opaque, the heights decoded are at most one step of
  the encoding apart (0.1 m; 1/256 m); measured: one step in 0.4 % of the pixels (terrain-RGB),
  in 48 to 50 % (Terrarium: ours adds 32768 in float32, whose steps are then 1/256: it rounds
  where TiTiler, in float64, truncates). Where there is no data (nodata, outside the raster)
  both are transparent (:func:`test_terrain_rgb_is_transparent_where_there_is_no_data`).
- hillshade: comparable once four differences by design are undone, see
  :func:`test_hillshade_is_titiler_s_with_the_light_turned_by_90_degrees`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
import rasterio
import redis
from fastapi import FastAPI
from rasterio.shutil import copy as copy_raster
from rasterio.warp import transform_bounds
from rio_tiler.colormap import cmap
from starlette.testclient import TestClient
from titiler.core.factory import TilerFactory

from shared.base.grid import TileAddress
from shared.raster.paths import encode_id
from shared.settings import Settings
from tests.layers import configure, decode, tile_url
from tests.rasters import write_raster

#: rasterio's windows (read by rio-tiler) still multiply with affine's ``*``
pytestmark = pytest.mark.filterwarnings("ignore:Use `@` matmul:PendingDeprecationWarning")

#: the z9 tile the rasters lie in: 1024 pixels a side are zoom 11's
ZONE = TileAddress(9, 270, 180)
SIDE = 1024
#: the rasters in metres start this many pixels east and south of the zone's corner: their
#: edges cross tiles, their pixels are those of zoom 11
SHIFT = (100, 60)
U16 = "titiler/scene-u16.tif"
DEM = "titiler/dem-f32.tif"
#: a scene in degrees: every tile is a warp, its pixels fall anywhere in the source's
DEGREES = "titiler/scene-4326.tif"
NODATA = -9999.0
#: tiles at the native zoom (11) and one coarser (10); the first of each cross the rasters'
#: north-west edge and their nodata corner
TILES = [
    TileAddress(11, 1080, 720),
    TileAddress(11, 1081, 721),
    TileAddress(11, 1082, 722),
    TileAddress(11, 1083, 723),
    TileAddress(10, 540, 360),
    TileAddress(10, 541, 361),
]
NEAREST = "resampling=nearest"


def _waves(side: int, phase: float) -> np.ndarray:
    """Ripples of a few pixels: a pixel's neighbours are several stretched levels away, so
    that a pixel taken from its neighbour shows."""
    x = np.arange(side, dtype=np.float64)
    y = x[:, None]
    return np.sin(x / 23 + phase) * np.cos(y / (17 + 9 * phase)) + 0.4 * np.sin((x + y) / 11)


def elevation(side: int = SIDE) -> np.ndarray:
    """A hill of 300..2300 m with ripples."""
    x = np.arange(side, dtype=np.float64)
    y = x[:, None]
    hill = 2000 * np.exp(-((x - side / 3) ** 2 + (y - side / 3) ** 2) / (2 * (side / 5) ** 2))
    return (300 + hill + 40 * _waves(side, 0.3)).astype(np.float32)


def _cog(
    raster_dir: Path,
    rel: str,
    data: np.ndarray,
    bounds: tuple[float, float, float, float],
    crs: str,
    nodata: float,
) -> Path:
    """``data`` as a COG at ``rel`` (256-pixel blocks, overviews made with AVERAGE)."""
    plain = write_raster(raster_dir / "titiler" / "plain.tif", data, bounds, crs, nodata=nodata)
    out = raster_dir / rel
    copy_raster(plain, out, driver="COG", BLOCKSIZE=256, OVERVIEW_RESAMPLING="AVERAGE")
    plain.unlink()
    with rasterio.open(out) as ds:
        assert ds.overviews(1) == [2, 4]
    return out


@pytest.fixture(scope="module")
def rasters(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> dict[str, Path]:
    """The COGs, configured as layers: a 4-band UInt16 scene (blue, green, red, near infrared;
    0 is nodata), a Float32 DEM (-9999 is nodata), both on zoom 11's grid, and a UInt16 scene
    in degrees. Their paths."""
    w, s, e, n = ZONE.bounds_3857()
    res = (e - w) / SIDE
    west, north = w + SHIFT[0] * res, n - SHIFT[1] * res
    metres = (west, north - SIDE * res, west + SIDE * res, north)
    scene = np.stack([(8000 + 3000 * _waves(SIDE, b)).astype(np.uint16) for b in range(4)])
    scene[:, :40, :40] = 0
    dem = elevation()
    dem[:24, :24] = NODATA
    lon0, lat0, lon1, lat1 = transform_bounds("EPSG:3857", "EPSG:4326", *ZONE.bounds_3857())
    degrees = (lon0 + 0.01, lat0 + 0.02, lon1 - 0.03, lat1 - 0.01)
    single = (8000 + 3000 * _waves(700, 1.0)).astype(np.uint16)
    single[:30, :30] = 0
    paths = {
        U16: _cog(raster_dir, U16, scene, metres, "EPSG:3857", 0),
        DEM: _cog(raster_dir, DEM, dem[np.newaxis], metres, "EPSG:3857", NODATA),
        DEGREES: _cog(raster_dir, DEGREES, single[np.newaxis], degrees, "EPSG:4326", 0),
    }
    for rel in paths:
        configure(settings, rdb, rel)
    return paths


@pytest.fixture(scope="module")
def titiler() -> Iterator[TestClient]:
    """TiTiler's tiler: ``titiler.core``'s ``TilerFactory`` as an app of its own."""
    app = FastAPI()
    app.include_router(TilerFactory().router)
    with TestClient(app) as tc:
        yield tc


def ours(client: TestClient, rel: str, tile: TileAddress, query: str) -> np.ndarray:
    """Our tile (RGBA, as int), drawn now."""
    r = client.get(tile_url(encode_id(rel), tile.z, tile.x, tile.y, f"?{query}&nocache=1"))
    assert r.status_code == 200, r.text
    image = decode(r.content)
    assert image.shape == (4, 256, 256)
    return image.astype(int)


def theirs(titiler: TestClient, path: Path, tile: TileAddress, query: str) -> np.ndarray:
    """TiTiler's tile (RGBA, as int) of the file at ``path``, nearest for its warp too."""
    url = f"/tiles/WebMercatorQuad/{tile.z}/{tile.x}/{tile.y}.png"
    r = titiler.get(f"{url}?url={quote(str(path))}&{query}&reproject=nearest")
    assert r.status_code == 200, r.text
    image = decode(r.content)
    if len(image) == 2:  # gray and alpha
        image = image[[0, 0, 0, 1]]
    assert image.shape == (4, 256, 256)
    return image.astype(int)


def both(
    client: TestClient,
    titiler: TestClient,
    rasters: dict[str, Path],
    rel: str,
    tile: TileAddress,
    query: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Our tile of layer ``rel`` and TiTiler's of its file, with the same query."""
    return ours(client, rel, tile, query), theirs(titiler, rasters[rel], tile, query)


def assert_stretched_alike(a: np.ndarray, b: np.ndarray, tile: TileAddress) -> float:
    """Same transparency; each channel ours − TiTiler's 0 or 1 (we round, TiTiler truncates).
    The fraction of the opaque values that are 1 apart."""
    assert np.array_equal(a[3], b[3]), tile
    opaque = a[3] == 255
    assert opaque.any(), tile
    diff = (a[:3] - b[:3])[:, opaque]
    assert diff.min() >= 0, (tile, diff.min())
    assert diff.max() <= 1, (tile, diff.max())
    # taking a neighbouring source pixel would be seen: one pixel off is far off
    shifted = (np.roll(a[:3], 1, axis=2) - b[:3])[:, opaque & np.roll(opaque, 1, axis=1)]
    assert np.abs(shifted).max() > 4, tile  # measured: 10 and more
    return float((diff == 1).mean())


def test_a_16_bit_scene_with_bidx_and_a_rescale_per_band(
    client: TestClient, titiler: TestClient, rasters: dict[str, Path]
) -> None:
    query = "bidx=3&bidx=2&bidx=1&rescale=5000,11000&rescale=6000,10000&rescale=4500,11500"
    rounded = []
    for tile in TILES:
        a, b = both(client, titiler, rasters, U16, tile, f"{query}&{NEAREST}")
        rounded.append(assert_stretched_alike(a, b, tile))
    # round against truncate: about half the values (measured 0.43..0.44)
    assert 0.3 < np.mean(rounded) < 0.6, rounded
    edge = ours(client, U16, TILES[0], f"{query}&{NEAREST}")
    assert 0.3 < (edge[3] == 255).mean() < 0.6  # the tiles cross the raster's edge


def test_a_scene_in_degrees_is_warped_from_the_same_source_pixels(
    client: TestClient, titiler: TestClient, rasters: dict[str, Path]
) -> None:
    for tile in TILES:
        a, b = both(client, titiler, rasters, DEGREES, tile, f"bidx=1&rescale=5000,11000&{NEAREST}")
        assert_stretched_alike(a, b, tile)


def colour_index_distance(table: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each pixel, how far apart in the colour map (256 RGBA entries) the entries of colours
    ``a`` and ``b`` (RGBA, pixels) are, the nearest two when colours repeat in it."""
    entries: dict[tuple[int, ...], list[int]] = {}
    for i, colour in enumerate(table):
        entries.setdefault(tuple(int(c) for c in colour), []).append(i)
    out = np.zeros(a.shape[1:], int)
    for row, col in zip(*np.nonzero((a != b).any(axis=0)), strict=True):
        mine = entries.get(tuple(a[:, row, col]), [])
        yours = entries.get(tuple(b[:, row, col]), [])
        assert mine, ("our colour is not in the colour map", a[:, row, col])
        assert yours, ("TiTiler's colour is not in the colour map", b[:, row, col])
        out[row, col] = min(abs(i - j) for i in mine for j in yours)
    return out


@pytest.mark.parametrize(
    ("rel", "query", "name"),
    [
        (DEM, "rescale=300,2300&colormap_name=terrain", "terrain"),
        (U16, "expression=(b4-b3)/(b4%2Bb3)&rescale=-1,1&colormap_name=rdylgn", "rdylgn"),
    ],
    ids=["dem-terrain", "ndvi-rdylgn"],
)
def test_a_stretched_band_takes_the_same_colour_of_the_colour_map(
    client: TestClient,
    titiler: TestClient,
    rasters: dict[str, Path],
    rel: str,
    query: str,
    name: str,
) -> None:
    table = np.array([cmap.get(name)[i] for i in range(256)])
    off = []
    for tile in TILES:
        a, b = both(client, titiler, rasters, rel, tile, f"{query}&{NEAREST}")
        assert np.array_equal(a[3], b[3]), tile
        opaque = a[3] == 255
        assert opaque.any(), tile
        distance = colour_index_distance(table, a, b)[opaque]
        assert distance.max() <= 1, tile  # the next entry, at a whole number
        off.append((distance > 0).mean())
    assert max(off) < 1e-3, off  # measured: at most 2 pixels of 65 536


def terrain_rgb_metres(image: np.ndarray) -> np.ndarray:
    return -10000 + (image[0] * 65536 + image[1] * 256 + image[2]) * 0.1


def terrarium_metres(image: np.ndarray) -> np.ndarray:
    return image[0] * 256 + image[1] + image[2] / 256 - 32768


@pytest.mark.parametrize(
    ("algorithm", "metres", "step"),
    [("terrainrgb", terrain_rgb_metres, 0.1), ("terrarium", terrarium_metres, 1 / 256)],
)
def test_a_dem_encoded_decodes_to_titiler_s_heights(
    client: TestClient,
    titiler: TestClient,
    rasters: dict[str, Path],
    algorithm: str,
    metres: Callable[[np.ndarray], np.ndarray],
    step: float,
) -> None:
    for tile in TILES:
        a, b = both(client, titiler, rasters, DEM, tile, f"algorithm={algorithm}&{NEAREST}")
        valid = (a[3] == 255) & (b[3] == 255)
        assert valid.mean() > 0.3, tile
        error = np.abs(metres(a) - metres(b))[valid]
        # one step apart: measured in 0.4 % of the pixels (terrain-RGB), 49 % (Terrarium)
        assert error.max() <= step * 1.001, (tile, error.max())


@pytest.mark.parametrize("algorithm", ["terrainrgb", "terrarium"])
def test_terrain_rgb_is_transparent_where_there_is_no_data(
    client: TestClient, titiler: TestClient, rasters: dict[str, Path], algorithm: str
) -> None:
    tile = TILES[0]  # the raster's north-west edge and its nodata corner
    a, b = both(client, titiler, rasters, DEM, tile, f"algorithm={algorithm}&{NEAREST}")
    assert 0.3 < (b[3] == 255).mean() < 0.6
    assert np.array_equal(a[3], b[3])


def titiler_to_gdaldem_azimuth(azimuth: float) -> float:
    """The azimuth (gdaldem's: where the light comes from, clockwise from north) of TiTiler's
    ``azimuth``: TiTiler's ``HillShade`` reads ``numpy.gradient``'s first axis (rows, going
    south) as its x and the columns as its y, which turns its light 90° anticlockwise."""
    return (azimuth - 90) % 360


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # TiTiler's
def test_hillshade_is_titiler_s_with_the_light_turned_by_90_degrees(
    client: TestClient, titiler: TestClient, rasters: dict[str, Path]
) -> None:
    """Ours is ``gdaldem hillshade``'s; TiTiler's (``titiler.core.algorithm.dem.HillShade``)
    differs from it by design, in four ways, each undone here to compare what is comparable:

    1. its gradient is per pixel (``numpy.gradient``, no pixel size: its shading depends on the
       zoom), ours per ground metre (Horn's, the pixel's size shrunk by the cosine of the
       latitude): ours is given ``z_factor`` = the ground pixel size at the tile's centre;
    2. its ``azimuth`` is turned: TiTiler's light from ``A`` is gdaldem's from ``A - 90°``
       (:func:`titiler_to_gdaldem_azimuth`), so the same URL ``algorithm=hillshade`` (both
       default to 45) lights from the north-west on TiTiler, from the north-east on ours (their
       shades then differ by 0.1 to 0.7 of the whole scale, median of a tile);
    3. its shade maps the cosine of the light's incidence ``c`` (-1..1) to ``255·(c+1)/2``,
       truncated; ours (gdaldem's) to ``1 + 254·max(c, 0)``: TiTiler's is turned into ours;
    4. its parameters ``z_exaggeration`` and ``buffer`` are not ours (``z_factor``; our buffer is
       our own business): our API refuses them (400), and TiTiler needs ``&buffer=3`` with them.

    Then, where both are opaque, ours is TiTiler's within 1 level (median; measured at most 0.55)
    and 5 (99th percentile; measured at most 3.2, the largest difference 8.6): Horn's 3 x 3
    gradient against central differences, and TiTiler's steps of two of our levels. Their
    transparency differs at a nodata corner only (Horn's reads the diagonal neighbour, central
    differences do not; measured: 1 pixel).
    """
    for tile in TILES:
        w, s, e, n = tile.bounds_3857()
        ground = (e - w) / 256 * np.cos(np.arctan(np.sinh((s + n) / 2 / 6378137)))
        for azimuth in (45, 315):
            params = json.dumps({"azimuth": azimuth, "angle_altitude": 45, "buffer": 3})
            query = f"algorithm=hillshade&algorithm_params={params}&buffer=3&{NEAREST}"
            b = theirs(titiler, rasters[DEM], tile, query)
            mine = {
                "azimuth": titiler_to_gdaldem_azimuth(azimuth),
                "angle_altitude": 45,
                "z_factor": ground,
            }
            query = f"algorithm=hillshade&algorithm_params={json.dumps(mine)}&{NEAREST}"
            a = ours(client, DEM, tile, query)
            assert (a[0] == a[1]).all()
            assert (a[1] == a[2]).all()
            both_opaque = (a[3] == 255) & (b[3] == 255)
            assert both_opaque.mean() > 0.3, tile
            incidence = (2 * b[0] + 1) / 255 - 1  # the middle of TiTiler's truncated step
            expected = 1 + 254 * np.clip(incidence, 0, 1)
            error = np.abs(a[0] - expected)[both_opaque]
            assert np.median(error) <= 1, (tile, azimuth, np.median(error))
            assert np.percentile(error, 99) <= 5, (tile, azimuth, np.percentile(error, 99))
            assert ((a[3] == 255) != (b[3] == 255)).sum() <= 4, tile
