"""Every raster draws right: any data type and band count by default, TiTiler's rendering
parameters per request and per layer, DEMs as hillshade and terrain-RGB — checked against GDAL's
own programs (gdalwarp, gdaldem) on the same window."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import morecantile
import numpy as np
import pytest
import rasterio
import rasterio.warp
import redis
from rasterio.enums import ColorInterp
from rio_tiler.colormap import cmap
from starlette.testclient import TestClient

from shared.base.grid import TileAddress
from shared.raster.paths import encode_id
from shared.settings import Settings
from tests.checks import assert_error
from tests.jobs import job_lines
from tests.layers import RGB, decode, tile_url
from tests.rasters import write_raster

#: the rasters lie over this z9 tile (1024 px: their pixels are those of zoom 11)
ZONE = TileAddress(9, 270, 180)
U16 = "render/scene-u16.tif"
DEM = "render/dem-f32.tif"
CLASSES = "render/classes.tif"
SIDE = 1024
NODATA = -9999.0
PALETTE = {
    0: (230, 25, 75, 255),
    1: (60, 180, 75, 255),
    2: (0, 130, 200, 255),
    3: (245, 130, 48, 255),
}


def _waves(side: int, phase: float) -> np.ndarray:
    x = np.arange(side, dtype=np.float64)
    y = x[:, None]
    return np.sin(x / 90 + phase) * np.cos(y / (70 + 20 * phase)) + 0.4 * np.sin((x + y) / 40)


def elevation(side: int = SIDE) -> np.ndarray:
    """A hill of 300..2300 m with ripples."""
    x = np.arange(side, dtype=np.float64)
    y = x[:, None]
    hill = 2000 * np.exp(-((x - side / 2) ** 2 + (y - side / 2) ** 2) / (2 * (side / 5) ** 2))
    return (300 + hill + 40 * _waves(side, 0.3)).astype(np.float32)


@pytest.fixture(scope="module")
def rasters(raster_dir: Path) -> Path:
    """A 4-band UInt16 scene (blue, green, red, near infrared; 0 is nodata), a Float32 DEM
    (nodata and NaN holes), a class raster with a colour table."""
    bounds = ZONE.bounds_3857()
    bands = [(8000 + 3000 * _waves(SIDE, b)).astype(np.uint16) for b in range(4)]
    scene = np.stack(bands)
    scene[:, :64, :64] = 0
    tiled = {"tiled": True, "blockxsize": 256, "blockysize": 256}
    write_raster(raster_dir / U16, scene, bounds, nodata=0, **tiled)
    with rasterio.open(raster_dir / U16, "r+") as ds:
        ds.colorinterp = [
            ColorInterp.blue,
            ColorInterp.green,
            ColorInterp.red,
            ColorInterp.undefined,
        ]
    dem = elevation()
    dem[:32, :32] = NODATA
    dem[100:110, 100:110] = np.nan
    write_raster(raster_dir / DEM, dem[np.newaxis], bounds, nodata=NODATA, **tiled)
    x = np.arange(SIDE)
    classes = ((x // 37 + x[:, None] // 53) % 4).astype(np.uint8)
    write_raster(raster_dir / CLASSES, classes[np.newaxis], bounds)
    with rasterio.open(raster_dir / CLASSES, "r+") as ds:
        ds.write_colormap(1, PALETTE)
    return raster_dir


def configured(client: TestClient, rel: str, query: str = "") -> dict[str, object]:
    r = client.get(f"/api-user/gis-raster/{rel}{query}")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def tile_of(client: TestClient, rel: str, tile: TileAddress, query: str = "") -> np.ndarray:
    r = client.get(tile_url(encode_id(rel), tile.z, tile.x, tile.y, query))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "image/png"
    return decode(r.content)


def gdalwarp(src: Path, tile: TileAddress, out: Path, resampling: str, buffer: int = 0) -> Path:
    """GDAL's warp of ``tile`` (``buffer`` pixels past each side) from ``src``, as Float32."""
    w, s, e, n = tile.bounds_3857()
    px = (e - w) / 256
    box = [w - buffer * px, s - buffer * px, e + buffer * px, n + buffer * px]
    size = str(256 + 2 * buffer)
    args = ["gdalwarp", "-q", "-overwrite", "-t_srs", "EPSG:3857", "-ot", "Float32"]
    args += ["-te", *map(repr, box), "-ts", size, size, "-r", resampling, "-dstnodata", "nan"]
    subprocess.run([*args, str(src), str(out)], check=True)
    return out


def child(tile: TileAddress, dz: int, dx: int = 0, dy: int = 0) -> TileAddress:
    n = 2**dz
    return TileAddress(tile.z + dz, tile.x * n + dx, tile.y * n + dy)


@pytest.mark.worker
def test_a_16_bit_scene_is_stretched_by_its_own_statistics(
    client: TestClient,
    rasters: Path,
    rdb: redis.Redis,
    settings: Settings,
    worker: subprocess.Popen[bytes],
    tmp_path: Path,
) -> None:
    result = configured(client, U16)
    stats = result["statistics"]
    assert isinstance(stats, list)
    assert [s["band"] for s in stats] == [1, 2, 3, 4]
    with rasterio.open(rasters / U16) as ds:
        source = ds.read(masked=True).astype(float)
    for entry, band in zip(stats, source, strict=True):
        p2, p98 = np.percentile(band.compressed(), [2, 98])
        assert abs(entry["percentile_2"] - p2) < 0.02 * (p98 - p2)
        assert abs(entry["percentile_98"] - p98) < 0.02 * (p98 - p2)
        assert entry["dtype"] == "uint16"
    rendering = result["rendering"]
    assert isinstance(rendering, dict)
    assert rendering["bidx"] == ["3", "2", "1"]  # red, green, blue by colour interpretation
    ranges = [tuple(float(v) for v in r.split(",")) for r in rendering["rescale"]]
    assert ranges == [
        (stats[b - 1]["percentile_2"], stats[b - 1]["percentile_98"]) for b in (3, 2, 1)
    ]
    lines = job_lines(rdb, client.get(f"/api-user/gis-raster/{U16}").headers["x-job-id"])
    assert any(line.startswith("Rendering: {") for line in lines)
    tilejson = client.get(f"/api-user/tilejson/{encode_id(U16)}.json")
    if tilejson.status_code == 404:
        tilejson = client.get(f"/api-user/rtile/{encode_id(U16)}/tilejson.json")
    assert tilejson.status_code == 200, tilejson.text
    assert tilejson.json()["rendering"] == rendering
    assert tilejson.json()["statistics"] == stats

    tile = child(ZONE, 2, 1, 2)  # 256 source pixels: no resampling between grids
    image = tile_of(client, U16, tile, "?nocache=1")
    rgb = image[:3].astype(float)
    assert (image[3] == 255).all()
    assert 40 < rgb.mean() < 215
    assert rgb.std() > 30
    warped = gdalwarp(rasters / U16, tile, tmp_path / "ref.tif", "near")
    with rasterio.open(warped) as ds:
        ref = ds.read([3, 2, 1])
    for out, band, (lo, hi) in zip(rgb, ref, ranges, strict=True):
        expected = np.clip((band - lo) * 255 / (hi - lo), 0, 255)
        assert np.abs(out - expected).max() <= 1
    corner = tile_of(client, U16, child(ZONE, 2), "?nocache=1")
    assert (corner[3, :64, :64] == 0).all()  # nodata: transparent
    assert (corner[3, 80:, 80:] == 255).all()


@pytest.mark.worker
def test_a_float_dem_is_gray_with_its_holes_transparent(
    client: TestClient, rasters: Path, worker: subprocess.Popen[bytes]
) -> None:
    result = configured(client, DEM)
    rendering = result["rendering"]
    assert isinstance(rendering, dict)
    assert rendering["bidx"] == ["1"]
    image = tile_of(client, DEM, child(ZONE, 2), "?nocache=1")
    assert (image[0] == image[1]).all()
    assert (image[1] == image[2]).all()
    assert (image[3, :32, :32] == 0).all()  # nodata
    assert (image[3, 100:110, 100:110] == 0).all()  # NaN
    assert (image[3] == 255).mean() > 0.95
    hill = tile_of(client, DEM, child(ZONE, 2, 1, 1), "?nocache=1")
    assert (hill[3] == 255).all()
    assert hill[0].min() < 60
    assert hill[0].max() > 240


@pytest.mark.worker
def test_a_colour_table_draws_only_its_colours_with_nearest(
    client: TestClient, rasters: Path, settings: Settings, worker: subprocess.Popen[bytes]
) -> None:
    result = configured(client, CLASSES)
    rendering = result["rendering"]
    assert isinstance(rendering, dict)
    assert rendering["resampling"] == "nearest"
    assert rendering["colormap"] == {str(k): list(v) for k, v in PALETTE.items()}
    manifest = settings.dirs.derived / encode_id(CLASSES) / "manifest.json"
    assert json.loads(manifest.read_text())["resampling"] == "nearest"
    for z in (9, 10, 12):
        tile = child(ZONE, z - ZONE.z)
        image = tile_of(client, CLASSES, tile, "?nocache=1")
        colours = {tuple(c) for c in image.reshape(4, -1).T}
        assert colours <= set(PALETTE.values()), z
        assert len(colours) == 4 or z == 12


@pytest.mark.worker
def test_request_parameters_draw_and_cache_apart_under_one_canonical_key(
    client: TestClient, rasters: Path, settings: Settings, worker: subprocess.Popen[bytes]
) -> None:
    configured(client, DEM)
    tile = child(ZONE, 2, 1, 1)
    plain = tile_of(client, DEM, tile)
    query = "?rescale=300,2300&colormap_name=terrain"
    coloured = client.get(tile_url(encode_id(DEM), tile.z, tile.x, tile.y, query))
    assert coloured.headers["x-cache"] == "MISS"
    image = decode(coloured.content)
    assert not (image[0] == image[1]).all()  # a colour map, not gray
    assert not np.array_equal(image, plain)
    # the same values in another order and spelling: the same cache entry
    again = client.get(
        tile_url(
            encode_id(DEM), tile.z, tile.x, tile.y, "?colormap_name=Terrain&rescale=3e2,2300.0"
        )
    )
    assert again.headers["x-cache"] == "HIT"
    assert again.content == coloured.content
    assert client.get(tile_url(encode_id(DEM), tile.z, tile.x, tile.y)).content == decode_png(plain)
    folders = {p.name for p in (settings.dirs.rtile / encode_id(DEM)).iterdir()}
    assert any(re.fullmatch(r"en~[0-9a-f]{16}", f) for f in folders), folders


@pytest.mark.worker
def test_the_access_check_names_the_cache_folder_of_the_parameters(
    client: TestClient, rasters: Path, settings: Settings, worker: subprocess.Popen[bytes]
) -> None:
    """What the nginx front asks before it sends a tile with parameters from disk: the folder
    of the canonical parameters (the tile route's own), for a key that may read the layer."""
    configured(client, DEM)
    access = f"/api-user/rtile/{encode_id(DEM)}/access"
    r = client.get(f"{access}?rescale=300,2300&colormap_name=terrain")
    assert r.status_code == 204, r.text
    folder = r.headers["x-tile-folder"]
    assert re.fullmatch(r"~[0-9a-f]{16}", folder)
    same = client.get(f"{access}?colormap_name=Terrain&rescale=3e2,2300.0")
    assert same.headers["x-tile-folder"] == folder  # another spelling, the same folder
    assert "x-tile-folder" not in client.get(access).headers  # no parameters: the language's
    tile = child(ZONE, 2, 1, 1)
    query = "?rescale=300,2300&colormap_name=terrain"
    drawn = client.get(tile_url(encode_id(DEM), tile.z, tile.x, tile.y, query))
    assert drawn.status_code == 200
    cached = settings.dirs.rtile / encode_id(DEM) / f"en{folder}" / str(tile.z) / str(tile.x)
    assert (cached / f"{tile.y}.png").read_bytes() == drawn.content
    before = sorted(p.name for p in (settings.dirs.rtile / encode_id(DEM)).iterdir())
    for hostile, parameter in (
        ("nocache=1", "nocache"),
        ("bbox=0,0,1,1", "bbox"),
        ("bidx=9", "bidx"),
        ("colormap_name=nope", "colormap_name"),
        ("rescale=1,nan", "rescale"),
        ("expression=" + "b1%2B" * 200 + "b1", "expression"),
    ):
        refused = client.get(f"{access}?{hostile}")
        assert refused.status_code == 400, hostile
        assert assert_error(refused.json(), "invalid-input")["detail"]["parameter"] == parameter
    assert sorted(p.name for p in (settings.dirs.rtile / encode_id(DEM)).iterdir()) == before
    # a key limited to another layer does not learn of this one
    made = client.post(
        "/api-user/api-keys", json={"name": "other", "role": "reader", "layers": [encode_id(U16)]}
    )
    assert made.status_code == 201, made.text
    hidden = client.get(
        f"{access}?{query[1:]}", headers={"Authorization": f"Bearer {made.json()['key']}"}
    )
    assert hidden.status_code == 404
    assert "x-tile-folder" not in hidden.headers


def decode_png(image: np.ndarray) -> bytes:
    from shared.base.png import png_avg

    return png_avg(np.ascontiguousarray(np.moveaxis(image, 0, -1)))


@pytest.mark.worker
def test_terrain_rgb_decodes_to_the_source_elevation(
    client: TestClient, rasters: Path, worker: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    configured(client, DEM)
    tile = child(ZONE, 2, 2, 1)  # the source's own grid
    for algorithm in ("terrainrgb", "terrarium"):
        image = tile_of(client, DEM, tile, f"?algorithm={algorithm}&resampling=nearest").astype(
            float
        )
        if algorithm == "terrainrgb":
            height = -10000 + (image[0] * 65536 + image[1] * 256 + image[2]) * 0.1
        else:
            height = image[0] * 256 + image[1] + image[2] / 256 - 32768
        with rasterio.open(gdalwarp(rasters / DEM, tile, tmp_path / "ref.tif", "near")) as ds:
            ref = ds.read(1)
        valid = np.isfinite(ref)
        assert np.abs(height[valid] - ref[valid]).max() <= 0.1, algorithm


@pytest.mark.worker
def test_hillshade_matches_gdaldem_on_the_same_window(
    client: TestClient, rasters: Path, worker: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    configured(client, DEM)
    tile = child(ZONE, 2, 1, 2)
    params = {"azimuth": 315, "angle_altitude": 40, "z_factor": 2}
    query = f"?algorithm=hillshade&algorithm_params={json.dumps(params)}&resampling=bilinear"
    image = tile_of(client, DEM, tile, query)
    assert (image[0] == image[1]).all()
    warped = gdalwarp(rasters / DEM, tile, tmp_path / "dem.tif", "bilinear", buffer=1)
    lat = np.degrees(np.arctan(np.sinh(sum(tile.bounds_3857()[1::2]) / 2 / 6378137)))
    shade = tmp_path / "shade.tif"
    args = ["gdaldem", "hillshade", "-q", "-az", "315", "-alt", "40", "-z", "2"]
    args += ["-s", repr(float(np.cos(np.radians(lat))))]
    subprocess.run([*args, str(warped), str(shade)], check=True)
    with rasterio.open(shade) as ds:
        ref = ds.read(1)[1:-1, 1:-1].astype(float)
    error = np.abs(image[0].astype(float) - ref)[2:-2, 2:-2]  # gdaldem leaves its edges 0
    assert np.median(error) <= 1
    assert np.percentile(error, 99) <= 3, np.percentile(error, 99)


@pytest.mark.worker
def test_an_ndvi_expression_and_a_saved_rendering(
    client: TestClient, rasters: Path, worker: subprocess.Popen[bytes], settings: Settings
) -> None:
    configured(client, U16)
    tile = child(ZONE, 2, 1, 2)
    ndvi = "?expression=(b4-b3)/(b4%2Bb3)&rescale=-1,1&colormap_name=rdylgn"
    image = tile_of(client, U16, tile, ndvi + "&nocache=1")
    with rasterio.open(rasters / U16) as ds:
        window = ds.read(window=((512, 768), (256, 512))).astype(float)
    expected = (window[3] - window[2]) / (window[3] + window[2])
    index = np.clip((expected + 1) * 127.5, 0, 255).astype(int)
    table = np.array([cmap.get("rdylgn")[i] for i in range(256)])
    assert np.abs(image[:3].astype(int) - np.moveaxis(table[index][..., :3], -1, 0)).max() <= 8

    # chosen at configuration: the layer's own drawing, kept when configured again
    result = configured(client, U16, ndvi)
    assert result["rendering"]["expression"] == "(b4-b3)/(b4+b3)"  # type: ignore[index]
    assert np.array_equal(tile_of(client, U16, tile), image)
    kept = configured(client, U16)
    assert kept["rendering"] == result["rendering"]
    assert np.array_equal(tile_of(client, U16, tile), image)
    configured(client, U16, "?bidx=3&bidx=2&bidx=1")
    assert not np.array_equal(tile_of(client, U16, tile), image)


def test_the_tilejson_carries_the_parameters_into_its_template(
    client: TestClient, layers: None
) -> None:
    r = client.get(
        f"/api-user/rtile/{encode_id(RGB)}/tilejson.json?bidx=1&colormap_name=viridis&rescale=0,255"
    )
    if r.status_code == 404:
        pytest.skip("no tilejson route at this path")
    assert r.status_code == 200, r.text
    template = r.json()["tiles"][0]
    params = parse_qsl(urlsplit(template).query)
    assert params == [("bidx", "1"), ("rescale", "0,255"), ("colormap_name", "viridis")]
    assert r.json()["rendering"] == {
        "bidx": ["1"],
        "rescale": ["0,255"],
        "colormap_name": "viridis",
    }


def test_an_8_bit_rgb_scene_keeps_mapnik_s_drawing(
    client: TestClient, layers: None, settings: Settings
) -> None:
    xml = (settings.dirs.mapnik / f"{encode_id(RGB)}.xml").read_text()
    assert 'name="rendering"' not in xml
    assert 'name="statistics"' in xml


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("bidx=9", "bidx"),
        ("bidx=0", "bidx"),
        ("bidx=x", "bidx"),
        ("rescale=1", "rescale"),
        ("rescale=1,inf", "rescale"),
        ("rescale=5,1", "rescale"),
        ("colormap_name=nope", "colormap_name"),
        ("colormap=" + json.dumps({str(i): "#000000" for i in range(257)}), "colormap"),
        ("colormap={bad", "colormap"),
        ("colormap=5", "colormap"),
        ("colormap=" + "[" * 3000, "colormap"),
        ("expression=b1%26b2", "expression"),
        ("expression=where(b1)", "expression"),
        ("expression=" + "b1%2B" * 200 + "b1", "expression"),
        ("expression=foo(b1)", "expression"),
        ("expression=__import__", "expression"),
        ("expression=b1.real", "expression"),
        ("expression=b99", "expression"),
        ("algorithm=blur", "algorithm"),
        ("algorithm=hillshade&bidx=1&bidx=2&bidx=3", "algorithm"),
        ('algorithm=hillshade&algorithm_params={"azimuth":999}', "algorithm_params"),
        ('algorithm=hillshade&algorithm_params={"x":1}', "algorithm_params"),
        ("nodata=abc", "nodata"),
        ("resampling=lanczos", "resampling"),
    ],
)
def test_a_bad_rendering_parameter_is_400_naming_it_and_caches_nothing(
    client: TestClient, layers: None, settings: Settings, query: str, parameter: str
) -> None:
    tile = TileAddress(9, 145, 219)
    assert client.get(tile_url(encode_id(RGB), tile.z, tile.x, tile.y)).status_code == 200
    cached = settings.dirs.rtile / encode_id(RGB)
    before = sorted(str(p) for p in cached.rglob("*"))
    for url in (
        tile_url(encode_id(RGB), tile.z, tile.x, tile.y, f"?{query}"),
        tile_url(encode_id(RGB), tile.z, tile.x, tile.y, f"?{query}", suffix="@2x.webp"),
        f"/api-user/rtile/{encode_id(RGB)}/tilejson.json?{query}",
        f"/api-user/gis-raster/{RGB}?{query}",
    ):
        r = client.get(url)
        assert r.status_code == 400, (url, r.text)
        assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == parameter
        assert "Traceback" not in r.text
    assert sorted(str(p) for p in cached.rglob("*")) == before
    assert client.get(tile_url(encode_id(RGB), tile.z, tile.x, tile.y)).status_code == 200


@pytest.mark.worker
def test_every_tile_route_draws_with_the_parameters(
    client: TestClient, rasters: Path, worker: subprocess.Popen[bytes]
) -> None:
    """rtile, the OGC API tiles, WMTS (KVP and REST, names in any case) and WMS GetMap draw a
    tile with the same parameters into the same pixels."""
    configured(client, DEM)
    layer, tile = encode_id(DEM), child(ZONE, 2, 1, 1)
    params = "rescale=300,2300&colormap_name=viridis"
    upper = "RESCALE=300,2300&Colormap_Name=viridis"
    expected = tile_of(client, DEM, tile, f"?{params}")
    w, s, e, n = tile.bounds_3857()
    urls = [
        f"/api-user/ogc/collections/{layer}/tiles/WebMercatorQuad/{tile.z}/{tile.y}/{tile.x}"
        f"?f=png&{params}",
        f"/api-user/wmts?SERVICE=WMTS&REQUEST=GetTile&VERSION=1.0.0&LAYER={layer}"
        f"&STYLE=default&TILEMATRIXSET=GoogleMapsCompatible&TILEMATRIX={tile.z}&TILEROW={tile.y}"
        f"&TILECOL={tile.x}&FORMAT=image/png&{upper}",
        f"/api-user/wmts/1.0.0/{layer}/default/GoogleMapsCompatible/{tile.z}/{tile.y}/{tile.x}.png"
        f"?{upper}",
        f"/api-user/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&LAYERS={layer}&STYLES="
        f"&CRS=EPSG:3857&BBOX={w},{s},{e},{n}&WIDTH=256&HEIGHT=256&FORMAT=image/png"
        f"&TRANSPARENT=TRUE&{upper}",
    ]
    for url in urls:
        r = client.get(url)
        assert r.status_code == 200, (url, r.text)
        assert np.array_equal(decode(r.content), expected), url
    # the OGC tileset and the WMTS capabilities carry them into their templates
    tileset = client.get(
        f"/api-user/ogc/collections/{layer}/tiles/WebMercatorQuad?f=json&{params}"
    ).json()
    hrefs = [link["href"] for link in tileset["links"] if link.get("templated")]
    assert hrefs
    for href in hrefs:
        assert parse_qsl(urlsplit(href).query)[-2:] == [
            ("rescale", "300,2300"),
            ("colormap_name", "viridis"),
        ]
    capabilities = client.get(f"/api-user/wmts?SERVICE=WMTS&REQUEST=GetCapabilities&{upper}")
    templates = re.findall(r'template="([^"]+)"', capabilities.text)
    assert templates, capabilities.text[-500:]
    assert all("?rescale=300,2300&amp;colormap_name=viridis" in t for t in templates), templates
    plain = client.get(urls[0].replace(f"&{params}", ""))
    assert not np.array_equal(decode(plain.content), expected)
    bad = client.get(urls[3].replace("viridis", "nope"))
    assert bad.status_code == 400
    assert "colormap_name" in bad.text


def gdal_values(src: Path, lon: float, lat: float) -> list[float]:
    """``gdallocationinfo -valonly -wgs84``: the values of every band at a point."""
    args = ["gdallocationinfo", "-valonly", "-wgs84", str(src), repr(float(lon)), repr(float(lat))]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return [float(v) for v in out.split()]


@pytest.mark.worker
def test_values_at_a_point_are_gdallocationinfo_s(
    client: TestClient, rasters: Path, worker: subprocess.Popen[bytes]
) -> None:
    configured(client, U16)
    configured(client, DEM)
    w, s, e, n = ZONE.bounds_4326()
    rng = np.random.default_rng(3)
    for lon, lat in zip(rng.uniform(w, e, 12), rng.uniform(s, n, 12), strict=True):
        r = client.get(f"/api-user/rtile/{encode_id(U16)}/point/{lon},{lat}")
        assert r.status_code == 200, r.text
        found = r.json()
        expected = gdal_values(rasters / U16, lon, lat)
        assert found["band_names"] == ["b1", "b2", "b3", "b4"]
        assert found["values"] == [None if v == 0 else v for v in expected]
        ndvi = client.get(
            f"/api-user/rtile/{encode_id(U16)}/point/{lon},{lat}?expression=(b4-b3)/(b4%2Bb3)"
        ).json()
        b3, b4 = expected[2], expected[3]
        assert ndvi["band_names"] == ["(b4-b3)/(b4+b3)"]
        assert ndvi["values"][0] == pytest.approx((b4 - b3) / (b4 + b3), abs=1e-6)
        height = client.get(f"/api-user/rtile/{encode_id(DEM)}/point/{lon},{lat}").json()
        (value,) = gdal_values(rasters / DEM, lon, lat)
        expected_height = None if value == NODATA or np.isnan(value) else value
        assert height["values"] == [pytest.approx(expected_height)]
    hole = client.get(f"/api-user/rtile/{encode_id(DEM)}/point/{w + 1e-5},{n - 1e-5}").json()
    assert hole["values"] == [None]  # nodata
    outside = client.get(f"/api-user/rtile/{encode_id(DEM)}/point/{e + 1},{n}")
    assert outside.status_code == 404
    assert client.get(f"/api-user/rtile/{encode_id(DEM)}/point/200,10").status_code == 400

    # WMS GetFeatureInfo at the centre of a map's pixel: the same values
    tile = child(ZONE, 2, 1, 1)
    tw, ts, te, tn = tile.bounds_3857()
    i, j = 100, 37
    url = (
        f"/api-user/wms?SERVICE=WMS&REQUEST=GetFeatureInfo&VERSION=1.3.0&LAYERS={encode_id(DEM)}"
        f"&QUERY_LAYERS={encode_id(DEM)}&STYLES=&CRS=EPSG:3857&BBOX={tw},{ts},{te},{tn}"
        f"&WIDTH=256&HEIGHT=256&I={i}&J={j}&INFO_FORMAT=application/json"
    )
    r = client.get(url)
    assert r.status_code == 200, r.text
    lon, lat = r.json()["coordinates"]
    x = tw + (i + 0.5) * (te - tw) / 256
    assert lon == pytest.approx(np.degrees(x / 6378137), abs=1e-9)
    assert r.json()["values"] == [pytest.approx(gdal_values(rasters / DEM, lon, lat)[0])]
    text = client.get(url.replace("application/json", "text/plain"))
    assert text.headers["content-type"].startswith("text/plain")
    assert f"b1 = {r.json()['values'][0]}" in text.text
    bad = client.get(url.replace("&I=100", "&I=300"))
    assert bad.status_code == 400


@pytest.mark.worker
def test_legends_follow_the_drawing(
    client: TestClient, rasters: Path, worker: subprocess.Popen[bytes]
) -> None:
    configured(client, CLASSES)
    configured(client, DEM)
    classes = client.get(f"/api-user/rtile/{encode_id(CLASSES)}/legend.json").json()
    assert classes["kind"] == "classes"
    assert [e["value"] for e in classes["entries"]] == [0, 1, 2, 3]
    assert classes["entries"][2]["color"] == "#0082c8ff"
    swatches = decode(client.get(f"/api-user/rtile/{encode_id(CLASSES)}/legend.png").content)
    assert tuple(swatches[:, 8, 2 * 16 + 8]) == PALETTE[2]

    gray = client.get(f"/api-user/rtile/{encode_id(DEM)}/legend.json").json()
    assert gray["kind"] == "gradient"
    assert gray["entries"][0]["color"] == "#000000ff"
    assert gray["min"] < 400 < 2000 < gray["max"]  # the layer's own 2-98 % stretch
    query = "?rescale=300,2300&colormap_name=viridis"
    viridis = client.get(f"/api-user/rtile/{encode_id(DEM)}/legend.json{query}").json()
    assert (viridis["min"], viridis["max"]) == (300, 2300)
    last = cmap.get("viridis")[255]
    assert viridis["entries"][-1] == {"value": 2300, "color": "#" + bytes(last).hex()}
    bar = decode(client.get(f"/api-user/rtile/{encode_id(DEM)}/legend.png{query}").content)
    assert bar.shape == (4, 16, 256)
    assert tuple(bar[:, 8, 255]) == tuple(last)
    wms = client.get(
        f"/api-user/wms?SERVICE=WMS&REQUEST=GetLegendGraphic&VERSION=1.3.0&LAYER={encode_id(DEM)}"
        f"&FORMAT=image/png&{query[1:]}"
    )
    assert wms.status_code == 200
    assert np.array_equal(decode(wms.content), bar)


@pytest.mark.worker
def test_terrain_rgb_agrees_with_the_height_route(
    client: TestClient, rasters: Path, settings: Settings, worker: subprocess.Popen[bytes]
) -> None:
    """The elevation a MapLibre ``raster-dem`` source decodes from our terrain-RGB tile is the
    one ``GET /height`` answers from the same DEM (in ``map/dem``), to 0.1 m."""
    configured(client, DEM)
    settings.dirs.dem.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(rasters / DEM, settings.dirs.dem / "dem-f32.tif")
    tile = child(ZONE, 2, 1, 1)  # the source's own grid: a tile's pixel is a source pixel
    image = tile_of(client, DEM, tile, "?algorithm=terrainrgb&resampling=nearest").astype(float)
    decoded = -10000 + (image[0] * 65536 + image[1] * 256 + image[2]) * 0.1
    w, s, e, n = tile.bounds_3857()
    for col, row in [(10, 20), (128, 128), (200, 31), (250, 250)]:
        x, y = w + (col + 0.5) * (e - w) / 256, n - (row + 0.5) * (n - s) / 256
        lon, lat = np.degrees(x / 6378137), np.degrees(np.arctan(np.sinh(y / 6378137)))
        r = client.get("/api-user/height", params={"x": lon, "y": lat})
        assert r.status_code == 200, r.text
        (result,) = r.json()["results"]
        assert abs(result["elevation"] - decoded[row, col]) <= 0.1, (col, row)


UTM = "render/utm-f32.tif"


def shift(ours: np.ndarray, ref: np.ndarray, valid: np.ndarray) -> tuple[float, float]:
    """The sub-pixel shift (columns, rows) of ``ours`` from ``ref`` where ``valid``, by least
    squares on the gradient of ``ref`` (first-order: exact for shifts well under a pixel)."""
    gy, gx = np.gradient(np.where(valid, ref, 0))
    inner = valid.copy()
    inner[:2], inner[-2:], inner[:, :2], inner[:, -2:] = False, False, False, False
    inner &= np.roll(valid, 1, 0) & np.roll(valid, -1, 0) & np.roll(valid, 1, 1)
    inner &= np.roll(valid, -1, 1)
    a = np.stack([gx[inner], gy[inner]], axis=1)
    (dx, dy), *_ = np.linalg.lstsq(a, -(ours - ref)[inner], rcond=None)
    return float(dx), float(dy)


@pytest.mark.worker
@pytest.mark.parametrize(
    ("rel", "z"), [(UTM, 9), (UTM, 10), (UTM, 11), (RGB, 9), (RGB, 10), (RGB, 11), (RGB, 12)]
)
def test_tiles_sample_the_source_where_gdalwarp_does_across_tile_edges(
    client: TestClient,
    raster_dir: Path,
    worker: subprocess.Popen[bytes],
    tmp_path: Path,
    rel: str,
    z: int,
) -> None:
    """A raster in UTM (reprojected for every tile; floats stretched, 8-bit imagery as it
    is, by default): two neighbouring tiles at several zooms are each within 0.1 px of GDAL's warp
    of the same tile (bilinear, OpenCV's weights), so they meet without a jump."""
    if rel == UTM and not (raster_dir / UTM).exists():
        x = np.arange(800, dtype=np.float64)
        y = x[:, None]
        data = 1000 + 400 * np.sin(x / 23) * np.cos(y / 31) + 200 * np.sin((x + 2 * y) / 17)
        bounds = (600000.0, 5100000.0, 600000.0 + 800 * 150, 5100000.0 + 800 * 150)
        write_raster(raster_dir / UTM, data[np.newaxis].astype(np.float32), bounds, "EPSG:32632")
    configured(client, rel)
    with rasterio.open(raster_dir / rel) as ds:
        w, s, e, n = rasterio.warp.transform_bounds(ds.crs, "EPSG:4326", *ds.bounds)
    centre = morecantile.tms.get("WebMercatorQuad").tile((w + e) / 2, (s + n) / 2, z)
    query = "?rescale=200,1800&resampling=bilinear&nocache=1" if rel == UTM else "?nocache=1"
    for dx in (0, 1):
        tile = TileAddress(z, centre.x + dx, centre.y)
        image = tile_of(client, rel, tile, query)
        ours = image[0].astype(float)
        warped = gdalwarp(raster_dir / rel, tile, tmp_path / "ref.tif", "bilinear")
        with rasterio.open(warped) as ds:
            ref = ds.read(1)
        if rel == UTM:
            ref = np.clip((ref - 200) * 255 / 1600, 0, 255)
        valid = np.isfinite(ref) & (image[3] == 255)
        assert valid.mean() > 0.2, tile
        # bytes against GDAL's floats: a quarter of a level apart by rounding alone
        assert np.abs(ours - ref)[valid].mean() < (0.6 if rel == UTM else 1.0), tile
        moved_x, moved_y = shift(ours, ref, valid)
        assert abs(moved_x) <= 0.1, (tile, moved_x)
        assert abs(moved_y) <= 0.1, (tile, moved_y)
    # the measure sees a shift: the reference moved by a third of a pixel is seen so
    third = np.roll(ref, 1, axis=1) * (1 / 3) + ref * (2 / 3)
    assert shift(third, ref, valid)[0] == pytest.approx(1 / 3, abs=0.08)


@pytest.mark.worker
@pytest.mark.parametrize(
    ("dtype", "count"),
    [
        ("uint16", 1),
        ("int16", 1),
        ("uint32", 3),
        ("int32", 2),
        ("float32", 4),
        ("float64", 5),
        ("uint8", 2),
        ("uint8", 5),
    ],
)
def test_every_data_type_draws_neither_blank_nor_saturated(
    client: TestClient,
    raster_dir: Path,
    worker: subprocess.Popen[bytes],
    tmp_path: Path,
    dtype: str,
    count: int,
) -> None:
    """Whatever the type and band count: the default tile is neither blank nor saturated, and
    each channel follows the band it draws (correlated with GDAL's warp of the source)."""
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    low, high = (info.min / 2, info.max / 2) if info else (-5e5, 3e6)
    if info and np.dtype(dtype).kind == "u":
        low = info.max / 8
    waves = [low + (high - low) * (0.5 + 0.45 * _waves(512, b)) / 1.4 for b in range(count)]
    rel = f"render/types/{dtype}-{count}.tif"
    nodata = (0 if np.dtype(dtype).kind == "u" else info.min) if info else -1e30
    write_raster(raster_dir / rel, np.stack(waves).astype(dtype), ZONE.bounds_3857(), nodata=nodata)
    result = configured(client, rel)
    assert result["rendering"] is not None
    bands = [int(b) for b in result["rendering"]["bidx"]]  # type: ignore[index]
    assert bands == ([1, 2, 3] if count >= 3 else [1])
    tile = child(ZONE, 1, 1, 0)  # 256 source pixels
    image = tile_of(client, rel, tile, "?nocache=1")
    assert (image[3] == 255).all()
    rgb = image[:3].astype(float)
    assert 5 < rgb.mean() < 250
    assert (rgb == 0).mean() < 0.1  # the 2-98 % cut: a few pixels at each end only
    assert (rgb == 255).mean() < 0.1
    with rasterio.open(gdalwarp(raster_dir / rel, tile, tmp_path / "ref.tif", "near")) as ds:
        source = ds.read()
    drawn = rgb if len(bands) == 3 else rgb[:1]
    for channel, band in zip(drawn, bands, strict=True):
        r = np.corrcoef(channel.ravel(), source[band - 1].ravel())[0, 1]
        assert r > 0.95, (dtype, count, band, r)


@pytest.mark.worker
@pytest.mark.parametrize("value", ["-1", "70000", "0.5"])
def test_a_nodata_outside_the_data_type_is_400(
    client: TestClient, rasters: Path, worker: subprocess.Popen[bytes], value: str
) -> None:
    configured(client, U16)
    tile = child(ZONE, 2, 1, 1)
    for resampling in ("nearest", "bilinear"):
        query = f"?nodata={value}&resampling={resampling}"
        r = client.get(tile_url(encode_id(U16), tile.z, tile.x, tile.y, query))
        assert r.status_code == 400, r.text
        assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == "nodata"
    assert tile_of(client, U16, tile, "?nodata=8000").shape == (4, 256, 256)


@pytest.mark.worker
def test_terrain_rgb_holes_are_transparent_at_sea_level(
    client: TestClient, rasters: Path, worker: subprocess.Popen[bytes]
) -> None:
    """Where the DEM has no data a terrain-RGB tile is transparent, and its colour is 0 m:
    MapLibre reads the colour alone (transparent black would be a pit of -10000 m)."""
    configured(client, DEM)
    image = tile_of(client, DEM, child(ZONE, 2), "?algorithm=terrainrgb&resampling=nearest")
    hole = image[:, :32, :32].reshape(4, -1).astype(float)
    assert (hole[3] == 0).all()
    assert (-10000 + (hole[0] * 65536 + hole[1] * 256 + hole[2]) * 0.1 == 0).all()
    terrarium = tile_of(client, DEM, child(ZONE, 2), "?algorithm=terrarium").astype(float)
    assert (terrarium[3, :32, :32] == 0).all()
    assert (terrarium[0, :32, :32] * 256 + terrarium[1, :32, :32] - 32768 == 0).all()
