"""dzk and dzk.api (spec 2.10, 4.16): a local PostGIS parcels table and kadastr.live."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from starlette.testclient import TestClient

from shared.settings import Settings
from tests.checks import assert_error
from tests.conftest import PG_SERVER, app_client
from tests.providers import fakes

RESULT_FIELDS = {
    "cadnum",
    "category",
    "purpose_code",
    "purpose",
    "use",
    "area",
    "unit_area",
    "ownershipcode",
    "ownership",
    "address",
    "geom",
    "geom_centroid",
}
LOCAL = "3222486200:03:001:0001"
OTHER = "3222486200:03:001:0002"


@pytest.fixture(scope="module")
def parcels_table(database_url: str) -> str:
    """A parcels table with two neighbouring parcels (1 km squares near Kyiv)."""
    db = database_url.rsplit("/", 1)[1]
    with psycopg.connect(f"{PG_SERVER}/{db}", autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS test_parcels")
        conn.execute(
            """CREATE TABLE test_parcels (
                cadnum text PRIMARY KEY, category text, purpose_code text, purpose text,
                use text, area numeric, unit_area text, ownershipcode text, ownership text,
                address text, geom geometry(MultiPolygon, 4326))"""
        )
        conn.execute("CREATE INDEX ON test_parcels USING gist (geom)")
        for cadnum, x0, address in [(LOCAL, 30.0, "Kyiv oblast, Bucha"), (OTHER, 30.01, None)]:
            conn.execute(
                """INSERT INTO test_parcels VALUES (%s, 'Agricultural land', '01.01',
                   '01.01 For commercial farming', 'Arable land', 1.5, 'ha', '100',
                   'Private', %s,
                   ST_Multi(ST_MakeEnvelope(%s, 50.0, %s, 50.01, 4326)))""",
                (cadnum, address, x0, x0 + 0.01),
            )
    return "test_parcels"


@pytest.fixture(scope="module")
def local_client(settings: Settings, parcels_table: str) -> Iterator[TestClient]:
    with app_client(settings.model_copy(update={"parcels_table": parcels_table})) as tc:
        yield tc


def assert_parcel(body: dict) -> dict:
    assert set(body) == {"success", "result"}
    assert body["success"] is True
    result = body["result"]
    assert set(result) == RESULT_FIELDS
    for name in RESULT_FIELDS - {"geom", "geom_centroid", "address"}:
        assert isinstance(result[name], str), name
    assert result["address"] is None or isinstance(result["address"], str)
    assert result["geom_centroid"]["type"] == "Point"
    return result


@pytest.mark.parametrize("path", ["/api-user/dzk", "/api-user/dzk.api", "/api/v1/dzk"])
@pytest.mark.parametrize("name", ["cad_num", "cadNum"])
def test_local_by_number(local_client: TestClient, path: str, name: str) -> None:
    r = local_client.get(path, params={name: LOCAL})
    assert r.status_code == 200
    result = assert_parcel(r.json())
    assert result["cadnum"] == LOCAL
    assert (result["purpose_code"], result["area"], result["unit_area"]) == ("01.01", "1.5", "ha")
    assert result["address"] == "Kyiv oblast, Bucha"
    assert result["geom"]["type"] == "MultiPolygon"
    assert result["geom"]["coordinates"][0][0][0] == [30.0, 50.0]
    assert result["geom_centroid"]["coordinates"] == pytest.approx([30.005, 50.005])


def test_local_by_point(local_client: TestClient) -> None:
    r = local_client.get("/api-user/dzk", params={"lng": 30.015, "lat": 50.005})
    result = assert_parcel(r.json())
    assert result["cadnum"] == OTHER
    assert result["address"] is None


def test_number_wins_over_point(local_client: TestClient) -> None:
    r = local_client.get("/api-user/dzk", params={"cad_num": LOCAL, "lng": 30.015, "lat": 50.005})
    assert r.json()["result"]["cadnum"] == LOCAL


def test_local_not_found(local_client: TestClient) -> None:
    r = local_client.get("/api-user/dzk", params={"cad_num": "1111111111:11:111:1111"})
    assert r.status_code == 404
    assert_error(r.json(), "not-found")
    r = local_client.get("/api-user/dzk", params={"lng": 10, "lat": 10})
    assert r.status_code == 404
    assert not fakes.CALLS  # the local source alone: no provider call


def test_missing_table_is_503(settings: Settings) -> None:
    with app_client(settings.model_copy(update={"parcels_table": "no_such_parcels"})) as tc:
        r = tc.get("/api-user/dzk", params={"cad_num": LOCAL})
    assert r.status_code == 503
    assert "no_such_parcels" in assert_error(r.json(), "not-configured")["message"]


def test_from_kadastr(psettings: Settings) -> None:
    with app_client(psettings.model_copy(update={"dzk_source": "kadastr"})) as tc:
        r = tc.get("/api-user/dzk", params={"cad_num": fakes.KADASTR_PARCEL["cadnum"]})
        assert r.status_code == 200
        result = assert_parcel(r.json())
        for name in RESULT_FIELDS - {"geom", "geom_centroid"}:
            assert result[name] == fakes.KADASTR_PARCEL[name]
        assert result["geom"] == fakes.KADASTR_PARCEL["geometry"]
        assert result["geom_centroid"]["coordinates"] == pytest.approx([30.525, 50.455])
        assert fakes.CALLS["kadastr"][0][1] == "/kadastr/api/parcels/8000000000:72:123:0045/"
        r = tc.get("/api-user/dzk.api", params={"lng": 30.525, "lat": 50.455})
        assert assert_parcel(r.json())["cadnum"] == fakes.KADASTR_PARCEL["cadnum"]
        r = tc.get("/api-user/dzk", params={"cad_num": LOCAL})
        assert r.status_code == 404  # the provider's own 404
        r = tc.get("/api-user/dzk", params={"lng": 1, "lat": 1})
        assert r.status_code == 404  # an empty search
        fakes.MODE["kadastr"] = "500"
        r = tc.get("/api-user/dzk", params={"cad_num": "8000000000:72:123:0046"})
        assert r.status_code == 502


def test_local_then_kadastr(psettings: Settings, parcels_table: str) -> None:
    update = {"dzk_source": "local+kadastr", "parcels_table": parcels_table}
    with app_client(psettings.model_copy(update=update)) as tc:
        assert (
            tc.get("/api-user/dzk", params={"cad_num": LOCAL}).json()["result"]["cadnum"] == LOCAL
        )
        assert not fakes.CALLS["kadastr"]
        r = tc.get("/api-user/dzk", params={"cad_num": fakes.KADASTR_PARCEL["cadnum"]})
        assert r.json()["result"]["ownership"] == fakes.KADASTR_PARCEL["ownership"]
        assert len(fakes.CALLS["kadastr"]) == 1


def test_kadastr_not_configured(settings: Settings) -> None:
    with app_client(settings.model_copy(update={"dzk_source": "kadastr"})) as tc:
        r = tc.get("/api-user/dzk", params={"cad_num": LOCAL})
    assert r.status_code == 503
    assert "MAPSVC_KADASTR_URL" in assert_error(r.json(), "not-configured")["message"]


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({}, "cad_num"),
        ({"cad_num": "3222486200:03:001"}, "cad_num"),
        ({"cad_num": "3222486200:03:001:00011"}, "cad_num"),
        ({"cadNum": "abc"}, "cadNum"),
        ({"cad_num": "3222486200-03-001-0001"}, "cad_num"),
        ({"lng": 30}, "lat"),
        ({"lng": 190, "lat": 50}, "lng"),
        ({"lng": "inf", "lat": 50}, "lng"),
        ({"lng": 30, "lat": "north"}, "lat"),
    ],
)
def test_dzk_bad_input(local_client: TestClient, params: dict, parameter: str) -> None:
    r = local_client.get("/api-user/dzk", params=params)
    assert r.status_code == 400
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == parameter
