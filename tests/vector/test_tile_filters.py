"""Vector tiles the caller shapes (issue 35): a CQL2 ``filter`` (text or JSON) and
``properties`` on ``vtile``, OGC tiles and items, through the parser and the bounds of items;
one cache entry per filter, however it is spelled."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import redis
from starlette.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.checks import assert_error
from tests.conftest import admin_client
from tests.layers import RGB, configure
from tests.vector.test_tiles import decode

LAYER = "public.test_points"
#: the tile that holds every test point (lon -10..9, lat 40..55: either side of 0)
TILE = (0, 0, 0)
VTILE = f"/api-user/vtile/{LAYER}/{TILE[0]}/{TILE[1]}/{TILE[2]}.pbf"
OGC_TILE = f"/api-user/ogc/collections/{LAYER}/tiles/WebMercatorQuad/{TILE[0]}/{TILE[2]}/{TILE[1]}"
TEXT = "kind = 'Shop' AND value < 30"
JSON_FILTER = {
    "op": "and",
    "args": [
        {"op": "=", "args": [{"property": "kind"}, "Shop"]},
        {"op": "<", "args": [{"property": "value"}, 30]},
    ],
}
#: the features both filters pick: every third point below 30
PICKED = {f"point {i}" for i in range(3, 30, 3)}


@pytest.fixture(scope="module")
def raster_layer(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> str:
    return configure(settings, rdb, RGB)


def features(data: bytes, tmp_path: Path) -> list[dict]:
    """The tile's features (GDAL's MVT driver names the feature ids ``mvt_id``)."""
    return decode(data, *TILE, tmp_path, LAYER)


def test_a_cql2_text_filter_picks_a_tile_s_features(vc: TestClient, tmp_path: Path) -> None:
    r = vc.get(VTILE, params={"filter": TEXT, "filter-lang": "cql2-text", "props": "name"})
    assert r.status_code == 200, r.text
    found = features(r.content, tmp_path)
    assert {f["name"] for f in found} == PICKED
    assert all(set(f) - {"mvt_id"} == {"geometry", "name"} for f in found)  # props: name only


def test_a_cql2_json_filter_picks_the_same_and_is_cached_once_however_spelled(
    vc: TestClient, tmp_path: Path
) -> None:
    spelled = json.dumps(JSON_FILTER)
    again = json.dumps(JSON_FILTER, indent=2, sort_keys=True)  # another spelling
    first = vc.get(VTILE, params={"filter": spelled, "filter-lang": "cql2-json", "nocache": 0})
    assert first.status_code == 200, first.text
    assert {f["name"] for f in features(first.content, tmp_path)} == PICKED
    second = vc.get(VTILE, params={"filter": again, "filter-lang": "cql2-json"})
    assert second.headers["x-cache"] == "HIT"  # one entry: the filter in one form
    assert second.content == first.content


def test_the_tilejson_carries_the_filter_in_one_form(vc: TestClient) -> None:
    r = vc.get(
        f"/api-user/gis-datasource/{LAYER}",
        params={"filter": json.dumps(JSON_FILTER, indent=4), "filter-lang": "cql2-json"},
    )
    assert r.status_code == 200, r.text
    carried = parse_qs(urlsplit(r.json()["tiles"][0]).query)
    assert carried["filter-lang"] == ["cql2-json"]
    assert json.loads(carried["filter"][0]) == JSON_FILTER
    assert " " not in carried["filter"][0]


def test_ogc_tiles_take_filter_and_properties_as_items_do(vc: TestClient, tmp_path: Path) -> None:
    r = vc.get(OGC_TILE, params={"filter": TEXT, "properties": "name,value"})
    assert r.status_code == 200, r.text
    found = features(r.content, tmp_path)
    assert {f["name"] for f in found} == PICKED
    assert all(set(f) - {"mvt_id"} == {"geometry", "name", "value"} for f in found)
    items = vc.get(
        f"/api-user/ogc/collections/{LAYER}/items",
        params={"filter": json.dumps(JSON_FILTER), "filter-lang": "cql2-json", "limit": 100},
    )
    assert items.status_code == 200, items.text
    assert {f["properties"]["name"] for f in items.json()["features"]} == PICKED


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"filter": "{not json", "filter-lang": "cql2-json"}, "filter"),
        ({"filter": '{"op": "nope", "args": []}', "filter-lang": "cql2-json"}, "filter"),
        ({"filter": "colour = 'red'", "filter-lang": "cql2-text"}, "filter"),
        ({"filter": "kind = 'Shop'", "filter-lang": "ecql"}, "filter-lang"),
        ({"filter": "x" * 5000, "filter-lang": "cql2-text"}, "filter"),
    ],
)
def test_a_bad_filter_is_400_naming_it_on_every_tile_route(
    vc: TestClient, params: dict[str, str], parameter: str
) -> None:
    for url in (VTILE, OGC_TILE, f"/api-user/ogc/collections/{LAYER}/items"):
        r = vc.get(url, params=params)
        assert r.status_code == 400, (url, r.text)
        assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == parameter


def test_a_raster_collection_s_tiles_take_no_filter(vc: TestClient, raster_layer: str) -> None:
    url = f"/api-user/ogc/collections/{raster_layer}/tiles/WebMercatorQuad/0/0/0.png"
    r = vc.get(url, params={"filter": "a = 1"})
    assert r.status_code == 400, r.text
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == "filter"


def _simplify(settings: Settings, px: float, **more: object) -> Settings:
    vector = settings.vector.model_copy(update={"vtile_simplify_px": px, **more})
    return settings.model_copy(update={"vector": vector})


def _tile_of(settings: Settings, path: str) -> bytes:
    with admin_client(create_app(settings)) as client:
        r = client.get(path, headers={"Accept-Encoding": "identity"}, params={"nocache": 1})
        assert r.status_code == 200, r.text
        return r.content


def test_low_zooms_of_polygons_are_simplified_by_pixels_of_their_zoom(
    settings: Settings, vector_tables: str, tmp_path: Path
) -> None:
    countries = "/api-user/vtile/public.countries/1/1/0.pbf"
    exact = _tile_of(_simplify(settings, 0), countries)
    simple = _tile_of(_simplify(settings, 2), countries)
    assert len(simple) < 0.8 * len(exact), (len(simple), len(exact))
    shapes = {}
    for name, data in (("exact", exact), ("simple", simple)):
        (tmp_path / name).mkdir()
        shapes[name] = decode(data, 1, 1, 0, tmp_path / name, "public.countries")
    # every country is still there (a small one kept whole), each outline still a polygon
    assert {f["name"] for f in shapes["simple"]} == {f["name"] for f in shapes["exact"]}
    # points are never moved
    points = "/api-user/vtile/public.test_points/0/0/0.pbf"
    assert _tile_of(_simplify(settings, 4), points) == _tile_of(_simplify(settings, 0), points)


def test_a_layer_s_own_simplification_wins(
    settings: Settings, vector_tables: str, tmp_path: Path
) -> None:
    config = tmp_path / "layers.json"
    exact = {"table": "public.countries", "simplify": 0}
    config.write_text(json.dumps({"layers": {"exact": exact}}))
    mine = _tile_of(_simplify(settings, 2, config=config), "/api-user/vtile/exact/1/1/0.pbf")
    plain = _tile_of(_simplify(settings, 0), "/api-user/vtile/public.countries/1/1/0.pbf")
    shapes = []
    for name, data in (("exact", mine), ("public.countries", plain)):
        (tmp_path / name).mkdir()
        found = decode(data, 1, 1, 0, tmp_path / name, "public.countries")
        shapes.append(sorted((f["name"], bytes(f["geometry"])) for f in found))
    assert shapes[0] == shapes[1]  # the alias's own 0 wins over the service's 2
