"""Vector tiles (decoded with GDAL's MVT driver) and TileJSON of PostGIS layers."""

from __future__ import annotations

import gzip
import time
import warnings
from pathlib import Path

import psycopg
import pyogrio.raw
import pytest
from starlette.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.checks import assert_error
from tests.conftest import admin_client, pg


def decode(data: bytes, z: int, x: int, y: int, tmp_path: Path, layer: str) -> list[dict]:
    """The features of one MVT layer, properties by name (GDAL's MVT driver reads the tile)."""
    path = tmp_path / f"{z}-{x}-{y}.pbf"
    path.write_bytes(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert [name for name, _ in pyogrio.list_layers(path)] == [layer]
        meta, _, geometries, values = pyogrio.raw.read(path, layer=layer, X=x, Y=y, Z=z)
    names = list(meta["fields"])
    return [
        {"geometry": geometries[i], **{n: values[j][i] for j, n in enumerate(names)}}
        for i in range(len(geometries))
    ]


def test_tilejson(vc: TestClient) -> None:
    r = vc.get("/api-user/gis-datasource/public.countries")
    assert r.status_code == 200
    tj = r.json()
    assert set(tj) == {
        "tilejson",
        "id",
        "name",
        "bounds",
        "center",
        "format",
        "minzoom",
        "maxzoom",
        "scheme",
        "tiles",
        "vector_layers",
        "watched",
    }
    assert tj["watched"] is False  # (tests/vector/test_watch.py watches a layer)
    assert (tj["tilejson"], tj["format"], tj["scheme"]) == ("3.0.0", "vmt", "xyz")
    assert tj["tiles"] == ["http://testserver/api-user/vtile/public.countries/{z}/{x}/{y}.pbf"]
    assert tj["bounds"] == pytest.approx([-180, -90, 180, 83.6451], abs=1e-3)
    assert len(tj["center"]) == 2
    (layer,) = tj["vector_layers"]
    assert layer == {
        "id": "public.countries",
        "fields": {
            "id": "integer",
            "name": "text",
            "iso_a3": "text",
            "continent": "text",
            "pop_est": "bigint",
            "gdp_md_est": "double precision",
        },
        "minzoom": 0,
        "maxzoom": 22,
        "count": 177,
    }
    v1 = vc.get("/api/v1/gis-datasource/public.test_points").json()
    assert v1["tiles"][0].startswith("http://testserver/api/v1/vtile/public.test_points/")
    assert v1["vector_layers"][0]["count"] == 300
    assert vc.get("/api-user/gis-datasource/private.secret").status_code == 404


def test_catalogue_lists_the_layers_with_their_tilejson(vc: TestClient, settings: Settings) -> None:
    r = vc.get("/api-user/gis-datasource")
    assert r.status_code == 200, r.text
    layers = {layer["id"]: layer for layer in r.json()["layers"]}
    assert list(layers) == sorted(layers)
    assert {"public.countries", "public.test_points", "public.big_countries"} <= set(layers)
    countries = layers["public.countries"]
    assert countries["geometry_type"] == "MULTIPOLYGON"
    assert countries["count"] == 177
    assert countries["bounds"] == pytest.approx([-180, -90, 180, 83.6451], abs=1e-3)
    assert layers["public.test_points"]["geometry_type"] == "POINT"
    assert layers["public.test_points"]["count"] == 300
    # each entry's TileJSON URL answers that layer's TileJSON
    for layer in ("public.countries", "public.test_points"):
        url = layers[layer]["tilejson"]
        assert url == f"http://testserver/api-user/gis-datasource/{layer}"
        assert vc.get(url).json()["id"] == layer
    # anonymous callers see the public layers only; a reader with a grant, its layers
    public = settings.model_copy(update={"public_layers": "public.test_points"})
    with TestClient(create_app(public), raise_server_exceptions=False) as anon:
        r = anon.get("/api-user/gis-datasource")
        assert r.status_code == 200, r.text
        assert [layer["id"] for layer in r.json()["layers"]] == ["public.test_points"]
        bad = anon.get("/api-user/gis-datasource", headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401
        assert_error(bad.json(), "invalid-token")


def test_countries_tile(vc: TestClient, tmp_path: Path) -> None:
    r = vc.get("/api-user/vtile/public.countries/1/0/0.pbf")
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/vnd.mapbox-vector-tile"
    feats = decode(r.content, 1, 0, 0, tmp_path, "public.countries")
    names = {f["name"] for f in feats}
    assert {"Canada", "United States of America", "Greenland"} <= names
    assert "Australia" not in names
    canada = next(f for f in feats if f["name"] == "Canada")
    assert canada["iso_a3"] == "CAN"
    assert canada["continent"] == "North America"
    only = vc.get("/api-user/vtile/public.countries/1/0/0.pbf?props=name&filter=continent=Europe")
    europe = decode(only.content, 1, 0, 0, tmp_path, "public.countries")
    assert {"Iceland", "Ireland"} <= {f["name"] for f in europe}
    assert all(set(f) <= {"geometry", "name", "mvt_id"} for f in europe)
    assert "Canada" not in {f["name"] for f in europe}


def test_empty_tile_is_204_and_gzip_when_accepted(vc: TestClient) -> None:
    empty = vc.get("/api-user/vtile/public.test_points/5/0/0.pbf")
    assert empty.status_code == 204
    assert empty.content == b""
    zipped = vc.get(
        "/api-user/vtile/public.countries/0/0/0.pbf", headers={"Accept-Encoding": "gzip"}
    )
    plain = vc.get(
        "/api-user/vtile/public.countries/0/0/0.pbf", headers={"Accept-Encoding": "identity"}
    )
    assert zipped.headers["content-encoding"] == "gzip"
    assert "content-encoding" not in plain.headers
    assert zipped.content == plain.content  # the client undid the gzip
    assert int(zipped.headers["content-length"]) < len(plain.content)
    assert gzip.decompress(gzip.compress(plain.content)) == plain.content
    uncached = vc.get(
        "/api-user/vtile/public.countries/0/0/0.pbf?nocache=1", headers={"Accept-Encoding": "gzip"}
    )
    assert (uncached.headers["content-encoding"], uncached.headers["x-cache"]) == ("gzip", "MISS")
    assert uncached.content == plain.content


def test_tiles_survive_dropped_database_connections(
    settings: Settings, vector_tables: str, tmp_path: Path
) -> None:
    """The tile read pool pings nothing: a connection the server dropped is replaced."""
    app_name = "mapsvc-test-read-pool"
    dropping = settings.model_copy(
        update={"database_url": f"{vector_tables}?application_name={app_name}"}
    )
    url = "/api-user/vtile/public.countries/1/0/0.pbf?nocache=1"
    with admin_client(create_app(dropping)) as client:
        before = client.get(url)
        assert before.status_code == 200
        with psycopg.connect(pg(vector_tables), autocommit=True) as conn:
            dropped = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (app_name,),
            ).fetchone()
        assert dropped
        assert dropped[0] >= 1
        for _ in range(3):
            after = client.get(url)
            assert after.status_code == 200
            assert after.content == before.content
    names = {f["name"] for f in decode(after.content, 1, 0, 0, tmp_path, "public.countries")}
    assert "Canada" in names


def test_feature_limit_per_tile(settings: Settings, vector_tables: str, tmp_path: Path) -> None:
    app = create_app(settings.model_copy(update={"vtile_max_features": 10}))
    with admin_client(app) as client:
        r = client.get("/api-user/vtile/public.test_points/0/0/0.pbf?nocache=1")
        assert len(decode(r.content, 0, 0, 0, tmp_path, "public.test_points")) == 10


def test_cache_follows_data_changes_and_admin_drop(
    vc: TestClient, vector_tables: str, tmp_path: Path
) -> None:
    url = "/api-user/vtile/public.test_lines/0/0/0.pbf"
    first = vc.get(url)
    assert first.headers["x-cache"] == "MISS"
    assert vc.get(url).headers["x-cache"] == "HIT"
    with psycopg.connect(pg(vector_tables), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO test_lines VALUES (3, 'new line', "
            "ST_GeomFromText('LINESTRING(20 20, 30 30)', 4326))"
        )
    deadline = time.monotonic() + 30
    while True:  # the table's statistics move a moment after the commit
        r = vc.get(url)
        if r.headers["x-cache"] == "MISS" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert r.headers["x-cache"] == "MISS"
    assert "new line" in {
        f["name"] for f in decode(r.content, 0, 0, 0, tmp_path, "public.test_lines")
    }
    assert vc.get(url).headers["x-cache"] == "HIT"
    dropped = vc.delete("/api-user/vtile/public.test_lines/cache")
    assert dropped.status_code == 200
    assert dropped.json()["layer"] == "public.test_lines"
    assert vc.get(url).headers["x-cache"] == "MISS"
    assert vc.get(url + "?nocache=1").headers["x-cache"] == "MISS"


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/api-user/vtile/public.countries/25/0/0.pbf", 400),
        ("/api-user/vtile/public.countries/2/4/0.pbf", 404),  # columns 0..3 at zoom 2
        ("/api-user/vtile/public.countries/a/0/0.pbf", 400),
        ("/api-user/vtile/public.countries/1/0/0.pbf?props=nope", 400),
        ("/api-user/vtile/public.countries/1/0/0.pbf?filter=name=a' OR 1=1 --", 204),
        ("/api-user/vtile/private.secret/0/0/0.pbf", 404),
    ],
)
def test_bad_tile_requests(vc: TestClient, path: str, status: int) -> None:
    r = vc.get(path)
    assert r.status_code == status, r.text
    if status >= 400:
        assert_error(r.json(), "invalid-input" if status == 400 else "not-found")
