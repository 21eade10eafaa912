"""TileJSON that works with the caller's credential, rasters and vectors (issue 24, part 1).

A raster layer's TileJSON (``rtile/<layer>/tilejson.json``) against the raster itself: its
bounds, zooms and a tile template that answers tiles of the format and size asked. Asked with
``?api_key=``, every template carries the key, and its tiles answer with no other credential;
asked with the header, no template carries one. The vector TileJSON likewise, with the
parameters that shape its tiles. Both mounts; private layers as every layer route treats them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import rasterio
import redis
from rasterio.warp import transform_bounds
from starlette.testclient import TestClient

from api import front
from api.app import create_app
from shared.raster.paths import encode_id
from shared.settings import Settings
from tests.checks import AUTH, assert_error
from tests.layers import RGB, RGB_ID, configuration, configure, decode
from tests.vector.test_tiles import decode as decode_mvt

MOUNTS = ("/api-user", "/api/v1")
WORLD = "single/world.rgb.tif"
WORLD_ID = encode_id(WORLD)
#: a tile of the Landsat scene, inside its bounds
TILE = {"z": 8, "x": 72, "y": 110}
MEDIA = {"png": "image/png", "webp": "image/webp", "jpg": "image/jpeg", "jpeg": "image/jpeg"}


@pytest.fixture(scope="module")
def app(
    settings: Settings, rdb: redis.Redis, raster_dir: Path, vector_tables: str
) -> Iterator[TestClient]:
    """The API, no credentials unless a request sends some; the scene and the world raster
    configured (every layer private)."""
    for rel in (RGB, WORLD):
        configure(settings, rdb, rel)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def new_key(app: TestClient, layers: list[str]) -> str:
    """A new reader key limited to ``layers``."""
    body = {"name": "tilejson", "role": "reader", "layers": layers}
    r = app.post("/api-user/api-keys", json=body, headers=AUTH)
    assert r.status_code == 201, r.text
    key: str = r.json()["key"]
    return key


@pytest.fixture(scope="module")
def key(app: TestClient) -> str:
    """A reader's key limited to the scene and the points."""
    return new_key(app, [RGB_ID, "public.test_points"])


@pytest.fixture(scope="module")
def other_key(app: TestClient) -> str:
    """A reader's key limited to the world raster and the lines."""
    return new_key(app, [WORLD_ID, "public.test_lines"])


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def query_of(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def native_zoom(src: Path) -> int:
    """The zoom whose pixels match the raster's, from rasterio (as the configuration says)."""
    with rasterio.open(src) as ds:
        merc = transform_bounds(ds.crs, "EPSG:3857", *ds.bounds, densify_pts=21)
        resolution = (merc[2] - merc[0]) / ds.width
    return round(math.log2(2 * math.pi * 6378137 / 256 / resolution))


@pytest.mark.parametrize("mount", MOUNTS)
def test_raster_tilejson_describes_the_layer(app: TestClient, raster_dir: Path, mount: str) -> None:
    r = app.get(f"{mount}/rtile/{RGB_ID}/tilejson.json", headers=AUTH)
    assert r.status_code == 200, r.text
    tj = r.json()
    assert set(tj) == {
        *("tilejson", "id", "name", "bounds", "center", "minzoom", "maxzoom"),
        *("scheme", "tiles", "rendering", "statistics"),
    }
    assert (tj["tilejson"], tj["id"], tj["scheme"]) == ("3.0.0", RGB_ID, "xyz")
    assert tj["rendering"] is None  # 8-bit RGB: drawn by Mapnik as it always was
    assert [band["band"] for band in tj["statistics"]] == [1, 2, 3]
    with rasterio.open(raster_dir / RGB) as ds:
        bounds = transform_bounds(ds.crs, "EPSG:4326", *ds.bounds, densify_pts=21)
    assert tj["bounds"] == pytest.approx(list(bounds), abs=1e-6)
    west, south, east, north = bounds
    assert tj["center"] == pytest.approx([(west + east) / 2, (south + north) / 2, 0], abs=1e-6)
    assert (tj["minzoom"], tj["maxzoom"]) == (0, native_zoom(raster_dir / RGB))
    assert tj["maxzoom"] == 9  # 300 m pixels
    template = f"http://testserver{mount}/rtile/{RGB_ID}/en/{{z}}/{{x}}/{{y}}.png"
    assert tj["tiles"] == [template]
    assert "public" not in r.headers.get("cache-control", "")  # it holds a host: never shared


@pytest.mark.parametrize(
    ("params", "suffix", "side"),
    [
        ({}, ".png", 256),
        ({"tile_format": "webp", "tile_scale": "2"}, "@2x.webp", 512),
        ({"tile_format": "jpeg"}, ".jpg", 256),
        ({"tile_format": "jpg", "tile_scale": "2", "lang": "uk"}, "@2x.jpg", 512),
    ],
)
def test_raster_template_answers_tiles_of_the_format_and_size_asked(
    app: TestClient, params: dict[str, str], suffix: str, side: int
) -> None:
    tj = app.get(f"/api/v1/rtile/{RGB_ID}/tilejson.json", params=params, headers=AUTH).json()
    (template,) = tj["tiles"]
    lang = params.get("lang", "en")
    assert template == f"http://testserver/api/v1/rtile/{RGB_ID}/{lang}/{{z}}/{{x}}/{{y}}{suffix}"
    tile = app.get(template.format(**TILE), headers=AUTH)
    assert tile.status_code == 200, tile.text
    assert tile.headers["content-type"] == MEDIA[suffix.rsplit(".", 1)[1]]
    image = decode(tile.content)
    assert image.shape[1:] == (side, side)
    assert image[:3].max() > 0  # the scene, not an empty tile


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"tile_format": "gif"}, "tile_format"),
        ({"tile_scale": "3"}, "tile_scale"),
        ({"lang": "xx"}, "lang"),
    ],
)
def test_raster_tilejson_refuses_what_no_tile_has(
    app: TestClient, params: dict[str, str], named: str
) -> None:
    r = app.get(f"/api-user/rtile/{RGB_ID}/tilejson.json", params=params, headers=AUTH)
    assert r.status_code == 400, r.text
    assert_error(r.json(), "invalid-input")
    assert r.json()["error"]["detail"]["parameter"] == named


@pytest.mark.parametrize("mount", MOUNTS)
def test_a_key_in_the_query_is_carried_into_the_raster_template(
    app: TestClient, key: str, mount: str
) -> None:
    params = {"api_key": key, "tile_scale": "2"}
    junk = app.get(f"{mount}/rtile/{RGB_ID}/tilejson.json", params={**params, "foo": "bar"})
    assert junk.status_code == 400, junk.text  # a parameter it does not define is refused
    assert junk.json()["error"]["detail"]["parameter"] == "foo"
    r = app.get(f"{mount}/rtile/{RGB_ID}/tilejson.json", params=params)
    assert r.status_code == 200, r.text
    (template,) = r.json()["tiles"]
    # the key alone: tile_scale is in the path of the template
    assert query_of(template) == {"api_key": [key]}
    assert template.startswith(f"http://testserver{mount}/rtile/{RGB_ID}/en/{{z}}/{{x}}/{{y}}@2x")
    tile = app.get(template.format(**TILE))  # no header: the key in the URL works
    assert tile.status_code == 200, tile.text
    assert decode(tile.content).shape[1:] == (512, 512)
    # asked with the header, the template carries no credential
    r = app.get(f"{mount}/rtile/{RGB_ID}/tilejson.json", headers=bearer(key))
    assert r.status_code == 200, r.text
    (template,) = r.json()["tiles"]
    assert "?" not in template  # no api_key, nothing else
    assert app.get(template.format(**TILE)).status_code == 401  # the client adds its header
    assert app.get(template.format(**TILE), headers=bearer(key)).status_code == 200


@pytest.mark.parametrize("mount", MOUNTS)
def test_a_private_layer_tilejson_is_refused_as_its_tiles_are(
    app: TestClient, other_key: str, mount: str
) -> None:
    url = f"{mount}/rtile/{RGB_ID}/tilejson.json"
    anonymous = app.get(url)
    assert anonymous.status_code == 401, anonymous.text
    assert_error(anonymous.json(), "unauthorized")
    # another layer's key, in the query or the header: as if the layer did not exist
    for asked in (
        app.get(url, params={"api_key": other_key}),
        app.get(url, headers=bearer(other_key)),
    ):
        assert asked.status_code == 404, asked.text
        assert_error(asked.json(), "not-found")
    unknown = app.get(f"{mount}/rtile/{encode_id('nope.tif')}/tilejson.json", headers=AUTH)
    assert unknown.status_code == 404
    assert_error(unknown.json(), "not-found")


@pytest.mark.parametrize("mount", MOUNTS)
def test_the_vector_template_carries_the_key_and_what_shapes_the_tiles(
    app: TestClient, key: str, mount: str, tmp_path: Path
) -> None:
    params = {
        "api_key": key,
        "props": "name,kind",
        "filter": "kind=Shop",
        "type": "point",
        "nocache": "1",
    }
    r = app.get(f"{mount}/gis-datasource/public.test_points", params=params)
    assert r.status_code == 200, r.text
    (template,) = r.json()["tiles"]
    assert template.startswith(
        f"http://testserver{mount}/vtile/public.test_points/{{z}}/{{x}}/{{y}}.pbf?"
    )
    assert query_of(template) == {
        "props": ["name,kind"],
        "filter": ["kind=Shop"],
        "type": ["POINT"],
        "api_key": [key],
    }
    assert "filter=kind%3DShop" in template  # URL-encoded
    tile = app.get(template.format(z=4, x=7, y=5))  # no header: the key in the URL works
    assert tile.status_code == 200, tile.text
    features = decode_mvt(tile.content, 4, 7, 5, tmp_path, "public.test_points")
    assert features
    assert {f["kind"] for f in features} == {"Shop"}
    assert all(set(f) <= {"geometry", "name", "kind", "mvt_id"} for f in features)  # no value
    # asked with the header: the parameters, no credential
    r = app.get(
        f"{mount}/gis-datasource/public.test_points",
        params={"props": "name", "extent": "-10,40,0,45", "id": "1,2"},
        headers=bearer(key),
    )
    assert r.status_code == 200, r.text
    (template,) = r.json()["tiles"]
    # carried in one form (the cache's): the extent's numbers as numbers are written
    carried = {"props": ["name"], "extent": ["-10.0,40.0,0.0,45.0"], "id": ["1,2"]}
    assert query_of(template) == carried


def test_the_vector_tilejson_refuses_what_its_tiles_would(
    app: TestClient, key: str, other_key: str
) -> None:
    url = "/api-user/gis-datasource/public.test_points"
    r = app.get(url, params={"props": "nope"}, headers=AUTH)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["detail"]["parameter"] == "props"
    assert app.get(url).status_code == 401
    assert app.get(url, params={"api_key": other_key}).status_code == 404
    # with no parameter, the template is the bare tile route
    (template,) = app.get(url, headers=bearer(key)).json()["tiles"]
    assert template == "http://testserver/api-user/vtile/public.test_points/{z}/{x}/{y}.pbf"


def test_public_url_makes_the_templates(settings: Settings, key: str, app: TestClient) -> None:
    public = settings.model_copy(update={"public_url": "https://maps.example.org"})
    with TestClient(create_app(public), raise_server_exceptions=False) as client:
        r = client.get(f"/api-user/rtile/{RGB_ID}/tilejson.json", params={"api_key": key})
        assert r.status_code == 200, r.text
        (template,) = r.json()["tiles"]
        assert template == (
            f"https://maps.example.org/api-user/rtile/{RGB_ID}/en/{{z}}/{{x}}/{{y}}.png"
            f"?api_key={key}"
        )


def test_the_configuration_result_names_the_tilejson(
    app: TestClient, settings: Settings, rdb: redis.Redis
) -> None:
    result = configuration(settings, rdb, WORLD, lang="uk", url_prefix="/api/v1")
    assert result["tilejson"] == f"/api/v1/rtile/{WORLD_ID}/tilejson.json?lang=uk"
    assert result["url"] == f"/api/v1/rtile/{WORLD_ID}/uk/{{z}}/{{x}}/{{y}}.png"
    tj = app.get(result["tilejson"], headers=AUTH).json()
    # the TileJSON's template is the configuration's url, made absolute
    assert tj["tiles"] == ["http://testserver" + result["url"]]
    assert tj["bounds"] == pytest.approx(result["extent"], abs=1e-9)


def test_no_tile_location_of_the_front_takes_the_tilejson() -> None:
    """The nginx front sends cached tiles itself; the TileJSON is the API's to answer."""
    patterns = [
        re.compile(p.replace("(?<", "(?P<")) for p in (*front._RASTER_TILES, *front._VECTOR_TILES)
    ]
    for mount in MOUNTS:
        assert patterns[0].match(f"{mount}/rtile/{RGB_ID}/en/8/72/110@2x.webp")
        for pattern in patterns:
            for path in ("rtile/{}/tilejson.json", "ogc/collections/{}/tiles/WebMercatorQuad"):
                assert not pattern.match(f"{mount}/{path.format(RGB_ID)}")
