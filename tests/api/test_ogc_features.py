"""OGC API – Features: items with paging, bbox, properties and CQL2-text filters, one item,
the queryables; bad input, hidden layers, keys carried in links."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pyproj
import pytest
from starlette.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.checks import ADMIN_KEY, AUTH, assert_error
from tests.conftest import POINTS, admin_client, pg

BASE = "http://testserver/api-user/ogc/collections"
POINTS_URL = "/api-user/ogc/collections/public.test_points"
GEOJSON = "application/geo+json"


@pytest.fixture(scope="module")
def oc(settings: Settings, vector_tables: str) -> Iterator[TestClient]:
    """The API on the vector tables, as the admin (header credential)."""
    with admin_client(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def items(client: TestClient, url: str, **params: str) -> dict[str, Any]:
    r = client.get(url, params=params) if params else client.get(url)  # a link: its own query
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith(GEOJSON)
    assert "no-store" in r.headers["cache-control"]
    body: dict[str, Any] = r.json()
    assert body["type"] == "FeatureCollection"
    assert body["numberReturned"] == len(body["features"])
    return body


def link(body: dict[str, Any], rel: str) -> dict[str, str] | None:
    return next((x for x in body["links"] if x["rel"] == rel), None)


def values(body: dict[str, Any], name: str = "value") -> list[Any]:
    return sorted(f["properties"][name] for f in body["features"])


def filtered(client: TestClient, cql: str, **params: str) -> dict[str, Any]:
    return items(client, f"{POINTS_URL}/items", filter=cql, limit="1000", **params)


def test_paging_follows_next_and_prev(oc: TestClient) -> None:
    first = items(oc, f"{POINTS_URL}/items", limit="70")
    assert first["numberMatched"] == POINTS
    assert first["numberReturned"] == 70
    assert first["timeStamp"].endswith("Z")
    assert link(first, "prev") is None
    collection = link(first, "collection")
    assert collection is not None
    assert collection["href"] == f"{BASE}/public.test_points"
    seen, page, pages = [], first, [first]
    while True:
        seen += [f["id"] for f in page["features"]]
        assert page["numberMatched"] == POINTS
        following = link(page, "next")
        if following is None:
            break
        assert following["type"] == GEOJSON
        assert following["href"].startswith(BASE)
        assert "api_key" not in following["href"]  # the header credential stays a header
        page = items(oc, following["href"])
        pages.append(page)
    assert seen == list(range(1, POINTS + 1))
    assert [p["numberReturned"] for p in pages] == [70, 70, 70, 70, 20]
    # prev of the second page is the first page; self is what was asked
    prev = link(pages[1], "prev")
    assert prev is not None
    back = items(oc, prev["href"])
    assert [f["id"] for f in back["features"]] == [f["id"] for f in first["features"]]
    self_link = link(pages[1], "self")
    assert self_link is not None
    assert parse_qs(urlsplit(self_link["href"]).query) == {
        "limit": ["70"],
        "offset": ["70"],
    }


def test_limit_defaults_to_10_and_a_larger_one_is_the_maximum(settings: Settings) -> None:
    small = settings.model_copy(
        update={"vector": settings.vector.model_copy(update={"geojson_max_features": 40})}
    )
    with admin_client(create_app(small), raise_server_exceptions=False) as client:
        assert items(client, f"{POINTS_URL}/items")["numberReturned"] == 10
        body = items(client, f"{POINTS_URL}/items", limit="5000")
        assert body["numberReturned"] == 40
        following = link(body, "next")
        assert following is not None
        assert "limit=40" in following["href"]
        # the document says so where clients (QGIS, GDAL) read a page size: a component
        document = client.get("/api-user/openapi.json").json()
        limit = document["components"]["parameters"]["limit"]
        assert (limit["name"], limit["in"]) == ("limit", "query")
        assert (limit["schema"]["default"], limit["schema"]["maximum"]) == (10, 40)
        items_get = document["paths"]["/ogc/collections/{collectionId}/items"]["get"]
        assert {"$ref": "#/components/parameters/limit"} in items_get["parameters"]


def test_bbox_4_or_6_numbers(oc: TestClient) -> None:
    for box in ("-5.5,40.5,0.5,42.5", "-5.5,40.5,-100,0.5,42.5,100"):
        body = filtered(oc, "value > 0", bbox=box)
        assert body["numberMatched"] == 12
        assert all(
            -5.5 <= x <= 0.5 and 40.5 <= y <= 42.5
            for x, y in (f["geometry"]["coordinates"] for f in body["features"])
        )
        self_link = link(body, "self")
        assert self_link is not None
        assert parse_qs(urlsplit(self_link["href"]).query)["bbox"] == ["-5.5,40.5,0.5,42.5"]
    for bad, parameter in (
        ({"bbox": "1,2,3"}, "bbox"),
        ({"bbox": "5,40,1,50"}, "bbox"),
        ({"bbox": "0,0,1,1", "bbox-crs": "http://www.opengis.net/def/crs/EPSG/0/3857"}, "bbox-crs"),
    ):
        r = oc.get(f"{POINTS_URL}/items", params=bad)
        assert r.status_code == 400, r.text
        assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == parameter


def test_properties_choose_the_fields(oc: TestClient) -> None:
    body = items(oc, f"{POINTS_URL}/items", properties="name,value", limit="3")
    assert [f["properties"] for f in body["features"]] == [
        {"name": f"point {i}", "value": i} for i in (1, 2, 3)
    ]
    assert "properties=name,value" in link(body, "next")["href"]  # type: ignore[index]
    r = oc.get(f"{POINTS_URL}/items", params={"properties": "name,secret"})
    assert r.status_code == 400
    assert r.json()["error"]["detail"]["parameter"] == "properties"


def test_cql2_text_filters(oc: TestClient) -> None:
    shops = filtered(oc, "kind = 'Shop' AND value > 100")
    assert values(shops) == [v for v in range(101, POINTS + 1) if v % 3 == 0]
    assert shops["numberMatched"] == len(values(shops))
    like = filtered(oc, "name LIKE 'point 1%'")
    assert values(like, "name") == sorted(
        f"point {i}" for i in range(1, POINTS + 1) if str(i).startswith("1")
    )
    assert values(filtered(oc, "value IN (3, 5, 400) OR id = 7")) == [3, 5, 7]
    assert values(filtered(oc, "value BETWEEN 10 AND 14 AND NOT kind = 'Shop'")) == [10, 11, 13, 14]
    assert values(filtered(oc, "value NOT BETWEEN 3 AND 299")) == [1, 2, 300]
    assert filtered(oc, "name IS NULL")["numberMatched"] == 0
    # the points lie at (-10 + i % 20, 40 + i // 20): this square holds i = 1, 2, 21, 22
    square = "POLYGON((-9.5 39.5, -7.5 39.5, -7.5 41.5, -9.5 41.5, -9.5 39.5))"
    assert values(filtered(oc, f"S_INTERSECTS(geom, {square})")) == [1, 2, 21, 22]
    assert values(filtered(oc, "S_INTERSECTS(geometry, BBOX(-9.5, 39.5, -7.5, 41.5))")) == [
        1,
        2,
        21,
        22,
    ]
    within = filtered(oc, f"S_WITHIN(geom, {square}) AND value < 20")
    assert values(within) == [1, 2]
    # the filter rides on the paging links, and the next page keeps it
    page = items(oc, f"{POINTS_URL}/items", filter="kind = 'Shop'", limit="40")
    following = link(page, "next")
    assert following is not None
    query = parse_qs(urlsplit(following["href"]).query)
    assert query["filter"] == ["kind = 'Shop'"]
    assert query["filter-lang"] == ["cql2-text"]
    assert values(items(oc, following["href"])) == list(range(123, 241, 3))


def test_a_filter_on_a_layer_in_another_srid(oc: TestClient) -> None:
    box = "BBOX(-78, 25, -77, 26)"
    found = items(
        oc, "/api-user/ogc/collections/public.test_utm/items", filter=f"S_INTERSECTS(geom, {box})"
    )
    assert [f["properties"]["name"] for f in found["features"]] == ["nassau"]
    elsewhere = "S_INTERSECTS(geom, BBOX(0, 0, 1, 1))"
    assert (
        items(oc, "/api-user/ogc/collections/public.test_utm/items", filter=elsewhere)[
            "numberMatched"
        ]
        == 0
    )


@pytest.mark.parametrize(
    ("cql", "said"),
    [
        ("nope = 1", "unknown field 'nope'"),
        ("kind = ", "not CQL2-text"),
        ("kind = 'a'; DROP TABLE test_points", "not CQL2-text"),
        ("value > 'many'", "is not a number"),
        ("kind = value", "compares a property"),
        ("CASEI(kind) = 'shop'", "not supported"),
        ("value + 1 > 3", "not supported"),
        ("S_INTERSECTS(kind, POINT(1 2))", "geometry"),
        ("S_INTERSECTS(geom, POINT(200 2))", "outside"),
        ("S_INTERSECTS(geom, POLYGON((0 0, 1 0)))", "invalid"),
        ("x" * 4001, "at most 4000"),
    ],
)
def test_bad_filters_are_400_naming_filter(oc: TestClient, cql: str, said: str) -> None:
    r = oc.get(f"{POINTS_URL}/items", params={"filter": cql})
    assert r.status_code == 400, r.text
    error = assert_error(r.json(), "invalid-input")
    assert error["detail"]["parameter"] == "filter"
    assert said in error["message"]
    assert "Traceback" not in r.text


def test_other_filter_languages_and_parameters_are_refused(oc: TestClient) -> None:
    for params, parameter in (
        ({"filter": "id = 1", "filter-lang": "ecql"}, "filter-lang"),
        ({"filter": "id = 1", "filter-lang": "cql2-json"}, "filter"),  # not JSON
        ({"filter": "id = 1", "filter-crs": "EPSG:3857"}, "filter-crs"),
        ({"f": "html"}, "f"),
        ({"limit": "0"}, "limit"),
        ({"colour": "red"}, "colour"),
    ):
        r = oc.get(f"{POINTS_URL}/items", params=params)
        assert r.status_code == 400, (params, r.text)
        assert r.json()["error"]["detail"]["parameter"] == parameter
    ok = filtered(oc, "id = 1", **{"filter-lang": "cql2-text", "f": "json"})
    assert values(ok) == [1]


def test_values_that_look_like_sql_are_only_values(oc: TestClient, vector_tables: str) -> None:
    for cql in (
        "name = 'point 1; DROP TABLE test_points; --'",
        "name LIKE '%'' OR ''1''=''1'",
        "kind IN ('Shop); DELETE FROM test_points; --')",
        "name = ':cql0'",
    ):
        r = oc.get(f"{POINTS_URL}/items", params={"filter": cql})
        assert r.status_code in (200, 400), r.text
        if r.status_code == 200:
            assert r.json()["numberMatched"] == 0
    assert values(filtered(oc, "name = 'point 1'"), "name") == ["point 1"]
    with psycopg.connect(pg(vector_tables)) as conn:
        assert conn.execute("SELECT count(*) FROM test_points").fetchone() == (POINTS,)


def test_crs_3857(oc: TestClient) -> None:
    crs = "http://www.opengis.net/def/crs/EPSG/0/3857"
    r = oc.get(f"{POINTS_URL}/items", params={"crs": crs, "filter": "id = 1", "limit": "1"})
    assert r.status_code == 200
    assert r.headers["content-crs"] == f"<{crs}>"
    expected = pyproj.Transformer.from_crs(4326, 3857, always_xy=True).transform(-9, 40)
    assert r.json()["features"][0]["geometry"]["coordinates"] == pytest.approx(list(expected))
    assert f"crs={crs.replace(':', '%3A').replace('/', '%2F')}" in r.json()["links"][0]["href"]


def test_one_item(oc: TestClient) -> None:
    r = oc.get(f"{POINTS_URL}/items/5")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith(GEOJSON)
    feature = r.json()
    assert feature["type"] == "Feature"
    assert feature["id"] == 5
    assert feature["properties"] == {"id": 5, "name": "point 5", "kind": "house", "value": 5}
    assert feature["geometry"] == {"type": "Point", "coordinates": [-5, 40]}
    rels = {x["rel"]: x["href"] for x in feature["links"]}
    assert rels == {
        "self": f"{BASE}/public.test_points/items/5",
        "collection": f"{BASE}/public.test_points",
    }
    for missing in ("99999", "abc", "1.5"):
        r = oc.get(f"{POINTS_URL}/items/{missing}")
        assert r.status_code == 404, r.text
        assert assert_error(r.json(), "not-found")["detail"]["featureId"] == missing
    r = oc.get("/api-user/ogc/collections/public.test_nopk/items/1")
    assert r.status_code == 404
    assert "no primary key" in r.json()["error"]["message"]
    # the layer without a key still lists its items, without ids
    assert (
        items(oc, "/api-user/ogc/collections/public.test_nopk/items")["features"][0]["id"] is None
    )


def test_queryables(oc: TestClient) -> None:
    r = oc.get(f"{POINTS_URL}/queryables")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/schema+json")
    schema = r.json()
    assert schema["$id"] == f"{BASE}/public.test_points/queryables"
    assert schema["type"] == "object"
    assert {n: p.get("type", p.get("format")) for n, p in schema["properties"].items()} == {
        "geom": "geometry-point",
        "id": "integer",
        "name": "string",
        "kind": "string",
        "value": "integer",
    }
    countries = oc.get("/api-user/ogc/collections/public.countries/queryables").json()
    assert countries["properties"]["geom"]["format"] == "geometry-multipolygon"


def test_unknown_and_raster_collections_are_404(oc: TestClient) -> None:
    for name in ("public.nope", "c2luZ2xlL3dvcmxkLnJnYi50aWY"):
        for tail in ("items", "items/1", "queryables"):
            r = oc.get(f"/api-user/ogc/collections/{name}/{tail}")
            assert r.status_code == 404, r.text
            assert_error(r.json(), "not-found")


def test_a_hidden_layer_is_404_and_a_key_rides_on_the_links(
    oc: TestClient, settings: Settings
) -> None:
    body = {"name": "points only", "role": "reader", "layers": ["public.test_points"]}
    r = oc.post("/api-user/api-keys", json=body, headers=AUTH)
    assert r.status_code == 201, r.text
    key = r.json()["key"]
    # no credential but the key in the query
    with TestClient(create_app(settings), raise_server_exceptions=False) as anon:
        for tail in ("items", "items/1", "queryables"):
            url = f"/api-user/ogc/collections/public.test_lines/{tail}"
            r = anon.get(url, params={"api_key": key})
            assert r.status_code == 404, r.text
            assert "test_lines" not in r.text
        r = anon.get(f"{POINTS_URL}/items", params={"api_key": key, "limit": "100"})
        assert r.status_code == 200, r.text
        for x in r.json()["links"]:
            assert parse_qs(urlsplit(x["href"]).query)["api_key"] == [key]
        following = link(r.json(), "next")
        assert following is not None
        second = anon.get(following["href"])  # the link carries the key
        assert second.status_code == 200
        assert second.json()["features"][0]["id"] == 101
        admin = anon.get(f"{POINTS_URL}/items/1", params={"api_key": ADMIN_KEY})
        assert all(f"api_key={ADMIN_KEY}" in x["href"] for x in admin.json()["links"])


def test_items_answer_as_the_geojson_endpoint(oc: TestClient) -> None:
    """The same query: the same features as ``/geojson`` (one code path)."""
    ogc = items(oc, f"{POINTS_URL}/items", limit="25", offset="50", filter="kind = 'Shop'")
    plain = oc.get(
        "/api-user/geojson/public.test_points?limit=25&offset=50&filter=kind=Shop"
    ).json()
    assert ogc["features"] == plain["features"]
    assert ogc["numberMatched"] == plain["numberMatched"] == POINTS // 3
