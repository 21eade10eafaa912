"""GeoJSON of PostGIS layers: shape, parameters, paging, reprojection, cache, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pyproj
import pytest
from starlette.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.checks import assert_error
from tests.conftest import POINTS, admin_client, pg

URL = "/api-user/geojson"


def features(client: TestClient, layer: str, query: str = "") -> dict[str, Any]:
    r = client.get(f"{URL}/{layer}?{query}")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/geo+json")
    body: dict[str, Any] = r.json()
    assert body["type"] == "FeatureCollection"
    assert body["numberReturned"] == len(body["features"])
    return body


def test_all_countries(vc: TestClient) -> None:
    body = features(vc, "public.countries")
    assert body["numberMatched"] == 177
    assert body["numberReturned"] == 177
    feature = next(f for f in body["features"] if f["properties"]["name"] == "Germany")
    assert feature["type"] == "Feature"
    assert isinstance(feature["id"], int)
    assert feature["geometry"]["type"] == "MultiPolygon"
    assert set(feature["properties"]) == {
        "id",
        "name",
        "iso_a3",
        "continent",
        "pop_est",
        "gdp_md_est",
    }
    assert feature["properties"]["iso_a3"] == "DEU"


def test_srid_reprojects_like_pyproj(vc: TestClient) -> None:
    utm = features(vc, "public.test_utm")["features"][0]["geometry"]["coordinates"]
    assert utm == pytest.approx([-77.35, 25.06], abs=1e-9)
    merc = features(vc, "public.test_utm", "srid=3857")["features"][0]["geometry"]["coordinates"]
    expected = pyproj.Transformer.from_crs(4326, 3857, always_xy=True).transform(-77.35, 25.06)
    assert merc == pytest.approx(list(expected), abs=1e-3)
    native = features(vc, "public.test_utm", "srid=32618")["features"][0]["geometry"]
    x, y = pyproj.Transformer.from_crs(4326, 32618, always_xy=True).transform(-77.35, 25.06)
    assert native["coordinates"] == pytest.approx([x, y], abs=1e-3)


def test_extent_filter_props_geom_id_type(vc: TestClient) -> None:
    inside = features(vc, "public.test_points", "extent=-5.5,40.5,0.5,42.5")
    coords = [f["geometry"]["coordinates"] for f in inside["features"]]
    assert coords
    assert all(-5.5 <= x <= 0.5 and 40.5 <= y <= 42.5 for x, y in coords)
    assert inside["numberMatched"] == 6 * 2
    shops = features(vc, "public.test_points", "filter=kind=Shop")
    assert shops["numberMatched"] == POINTS // 3
    high = features(vc, "public.test_points", "filter=value>=290,kind!=Shop")
    assert sorted(f["properties"]["value"] for f in high["features"]) == [
        v for v in range(290, 301) if v % 3
    ]
    contains = features(vc, "public.test_points", "filter=name~POINT 29")
    assert {f["properties"]["name"] for f in contains["features"]} == {
        "point 29",
        *(f"point {i}" for i in range(290, 300)),
    }
    subset = features(vc, "public.test_points", "props=name&geom=0&limit=3")
    assert [f["properties"] for f in subset["features"]] == [
        {"name": "point 1"},
        {"name": "point 2"},
        {"name": "point 3"},
    ]
    assert all(f["geometry"] is None for f in subset["features"])
    by_id = features(vc, "public.test_points", "id=5,7")
    assert [f["id"] for f in by_id["features"]] == [5, 7]
    assert features(vc, "public.test_points", "type=Polygon")["numberMatched"] == 0
    assert features(vc, "public.test_lines", "type=linestring")["numberMatched"] == 2


@pytest.mark.parametrize("off", ["0", "false", "no", "False"])
def test_geom_off_in_any_spelling_drops_the_geometry(vc: TestClient, off: str) -> None:
    """``geom`` is a flag: each spelling of "no" leaves the geometry out, keeps the rest."""
    body = features(vc, "public.test_points", f"geom={off}&props=name&limit=2&nocache=1")
    assert [(f["id"], f["geometry"], f["properties"]) for f in body["features"]] == [
        (1, None, {"name": "point 1"}),
        (2, None, {"name": "point 2"}),
    ]
    for on in ("1", "true", "yes"):
        shown = features(vc, "public.test_points", f"geom={on}&props=name&limit=2")
        assert [f["geometry"]["type"] for f in shown["features"]] == ["Point", "Point"]


def test_geom_that_is_no_flag_is_400(vc: TestClient) -> None:
    r = vc.get(f"{URL}/public.test_points?geom=maybe")
    assert r.status_code == 400, r.text
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == "geom"


def test_paging(vc: TestClient) -> None:
    first = features(vc, "public.test_points", "limit=100")
    assert first["numberMatched"] == POINTS
    assert first["numberReturned"] == 100
    links = {link["rel"]: link["href"] for link in first["links"]}
    assert "offset=100" in links["next"]
    assert "prev" not in links
    last = features(vc, "public.test_points", "limit=100&offset=250")
    assert last["numberReturned"] == 50
    assert [f["id"] for f in last["features"]][:2] == [251, 252]
    rels = {link["rel"] for link in last["links"]}
    assert "next" not in rels
    assert "prev" in rels


def test_views_and_tables_without_key(vc: TestClient) -> None:
    big = features(vc, "public.big_countries", "props=name")
    names = {f["properties"]["name"] for f in big["features"]}
    assert {"China", "India", "United States of America"} <= names
    nopk = features(vc, "public.test_nopk")
    assert nopk["features"][0]["id"] is None
    r = vc.get(f"{URL}/public.test_nopk?id=1")
    assert r.status_code == 400


def test_debug_and_cache(vc: TestClient) -> None:
    debug = features(vc, "public.test_lines", "debug=1")
    assert debug["debug"]["sql"].startswith("""SELECT '{"type": "Feature", "id": '""")
    assert isinstance(debug["debug"]["ms"], int)
    first = vc.get(f"{URL}/public.test_lines?props=name")
    again = vc.get(f"{URL}/public.test_lines?props=name")
    assert (first.headers["x-cache"], again.headers["x-cache"]) == ("MISS", "HIT")
    assert again.json() == first.json()
    assert vc.get(f"{URL}/public.test_lines?props=name&nocache=1").headers["x-cache"] == "MISS"


def test_features_are_what_postgis_makes_of_each_row(vc: TestClient, vector_tables: str) -> None:
    """The feature text is put together in SQL: it parses to what json_build_object makes."""
    body = features(vc, "public.countries", "nocache=1")
    with psycopg.connect(pg(vector_tables)) as conn:
        rows = conn.execute(
            "SELECT json_build_object('type', 'Feature', 'id', t.id, 'geometry',"
            " ST_AsGeoJSON(t.geom, 9)::json, 'properties', to_jsonb(t) - 'geom')"
            " FROM public.countries t ORDER BY t.id"
        ).fetchall()
    assert body["features"] == [row[0] for row in rows]
    lines = features(vc, "public.test_lines", "geom=0&props=name&nocache=1")["features"]
    assert lines
    assert all(f["geometry"] is None for f in lines)
    assert all(set(f["properties"]) == {"name"} for f in lines)


def test_a_page_larger_than_the_read_ahead_streams_the_same_features(
    vc: TestClient, settings: Settings, vector_tables: str
) -> None:
    """Past the read-ahead, the page is read again through a cursor: the same answer."""
    whole = features(vc, "public.countries", "nocache=1")
    small = settings.model_copy(update={"geojson_buffer_bytes": 20_000})
    with admin_client(create_app(small), raise_server_exceptions=False) as client:
        streamed = features(client, "public.countries", "nocache=1")
        past = features(client, "public.countries", "nocache=1&offset=500")
        near = features(client, "public.test_points", "nocache=1&limit=5&offset=297")
    assert streamed["features"] == whole["features"]
    assert streamed["numberMatched"] == streamed["numberReturned"] == 177
    assert (past["numberMatched"], past["numberReturned"]) == (177, 0)
    assert (near["numberMatched"], near["numberReturned"]) == (POINTS, POINTS - 297)
    # past the last page on the one-statement path too: the count comes from a query of its own
    beyond = features(vc, "public.countries", "nocache=1&offset=500")
    assert (beyond["numberMatched"], beyond["numberReturned"]) == (177, 0)


def test_named_queries(settings: Settings, vector_tables: str, tmp_path: Path) -> None:
    config = tmp_path / "layers.json"
    config.write_text(
        json.dumps(
            {
                "layers": {
                    "countries": {
                        "table": "public.countries",
                        "minzoom": 1,
                        "maxzoom": 8,
                        "queries": {"asia": "t.continent = 'Asia'"},
                    }
                }
            }
        )
    )
    app = create_app(settings.model_copy(update={"vector_config": config}))
    with admin_client(app, raise_server_exceptions=False) as client:
        asia = features(client, "countries", "sql=asia&props=continent")
        assert asia["numberMatched"] > 40
        assert {f["properties"]["continent"] for f in asia["features"]} == {"Asia"}
        tj = client.get("/api-user/gis-datasource/countries").json()
        assert (tj["minzoom"], tj["maxzoom"]) == (1, 8)
        for bad in ("nope", "SELECT 1", "asia; DROP TABLE countries"):
            r = client.get(f"{URL}/countries", params={"sql": bad})
            assert r.status_code == 400
            assert "registered: asia" in assert_error(r.json(), "invalid-input")["message"]


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("filter=nope=1", "filter"),
        ("props=name,nope", "props"),
        ("filter=value=abc", "filter"),
        ("filter=name", "filter"),
        ("srid=999999", "srid"),
        ("srid=abc", "srid"),
        ("extent=1,2,3", "extent"),
        ("extent=10,10,0,0", "extent"),
        ("extent=-200,0,0,10", "extent"),
        ("type=Blob", "type"),
        ("limit=0", "limit"),
        ("offset=-1", "offset"),
    ],
)
def test_bad_parameters_are_400_naming_them(vc: TestClient, query: str, parameter: str) -> None:
    r = vc.get(f"{URL}/public.test_points?{query}")
    assert r.status_code == 400, r.text
    error = assert_error(r.json(), "invalid-input")
    assert error["detail"].get("parameter") == parameter
    if parameter in ("filter", "props") and "nope" in query:
        assert "valid fields: id, name, kind, value" in error["message"]


@pytest.mark.parametrize(
    "query",
    [
        "filter=name=x' OR '1'='1",
        "filter=name=a'; DROP TABLE test_points; --",
        "filter=kind=Shop' UNION SELECT * FROM private.secret --",
        "filter=name~%' OR 1=1 --",
        "props=name;DROP TABLE test_points",
        "props=name) FROM private.secret --",
        "srid=4326;DROP TABLE test_points",
        "extent=0,0,1,1);DROP TABLE test_points",
        "id=1 OR 1=1",
        "id=1);DELETE FROM test_points;--",
        "type=Point' --",
        "sql=1=1",
        "limit=1;DROP TABLE test_points",
    ],
)
def test_injection_attempts_are_refused_or_match_nothing(
    vc: TestClient, vector_tables: str, query: str
) -> None:
    r = vc.get(f"{URL}/public.test_points?{query}")
    if r.status_code == 200:
        assert r.json()["numberMatched"] == 0
    else:
        assert r.status_code == 400, r.text
        assert_error(r.json(), "invalid-input")
    with psycopg.connect(pg(vector_tables)) as conn:
        assert conn.execute("SELECT count(*) FROM test_points").fetchone() == (POINTS,)


def test_layers_outside_the_catalogue_are_unreachable(vc: TestClient) -> None:
    for layer in ("private.secret", "public.nope", "public.countries;DROP", "pg_catalog.pg_class"):
        r = vc.get(f"{URL}/{layer}")
        assert r.status_code == 404
        message = assert_error(r.json(), "not-found")["message"]
        assert message.endswith("gis-datasource lists the layers")  # names none of them
        assert "test_points" not in message


def test_statement_timeout_is_503_and_the_pool_recovers(
    settings: Settings, vector_tables: str, tmp_path: Path
) -> None:
    config = tmp_path / "slow.json"
    slow = "(SELECT true FROM pg_sleep(0.02 + t.id * 0))"  # 20 ms a row: 6 s for the table
    config.write_text(
        json.dumps({"layers": {"slow": {"table": "public.test_points", "queries": {"slow": slow}}}})
    )
    update = {"vector_statement_timeout_ms": 300, "vector_config": config}
    with admin_client(
        create_app(settings.model_copy(update=update)), raise_server_exceptions=False
    ) as client:
        r = client.get(f"{URL}/slow?sql=slow&nocache=1")
        assert r.status_code == 503
        assert "statement timeout (300 ms)" in assert_error(r.json(), "unavailable")["message"]
        for _ in range(3):
            assert client.get(f"{URL}/public.test_lines?nocache=1").status_code == 200


def test_a_broken_view_is_422_and_harms_nothing(settings: Settings, vector_tables: str) -> None:
    with psycopg.connect(pg(vector_tables), autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE VIEW broken_points AS SELECT id, geom, 1 / (id - id) AS boom "
            "FROM test_points"
        )
    try:
        with admin_client(create_app(settings), raise_server_exceptions=False) as client:
            r = client.get(f"{URL}/public.broken_points")
            assert r.status_code == 422
            assert "division by zero" in assert_error(r.json(), "unprocessable")["message"]
            assert client.get(f"{URL}/public.test_lines").status_code == 200
    finally:
        with psycopg.connect(pg(vector_tables), autocommit=True) as conn:
            conn.execute("DROP VIEW broken_points")


def test_a_view_too_slow_to_describe_is_left_out_of_the_catalogue(
    settings: Settings, vector_tables: str
) -> None:
    with psycopg.connect(pg(vector_tables), autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE VIEW slow_view AS SELECT id, geom FROM test_points p "
            "WHERE (SELECT true FROM pg_sleep(0.02 + p.id * 0))"  # 6 s to count
        )
    update = {"vector_statement_timeout_ms": 300}
    try:
        with admin_client(
            create_app(settings.model_copy(update=update)), raise_server_exceptions=False
        ) as client:
            r = client.get(f"{URL}/public.slow_view")
            assert r.status_code == 404
            assert_error(r.json(), "not-found")
            catalogue = client.get("/api-user/gis-datasource").json()["layers"]
            listed = [layer["id"] for layer in catalogue]
            assert "public.test_lines" in listed
            assert "public.slow_view" not in listed
            assert client.get(f"{URL}/public.test_lines").status_code == 200
    finally:
        with psycopg.connect(pg(vector_tables), autocommit=True) as conn:
            conn.execute("DROP VIEW slow_view")
