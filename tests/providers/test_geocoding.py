"""geocode and reverse-geocode (spec 2.7, 4.10, 4.11) against fake providers."""

from __future__ import annotations

import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from shared.settings import Settings
from tests.checks import assert_error
from tests.conftest import app_client, with_providers
from tests.providers import fakes

HERE_ADDRESS = {
    "label",
    "countryCode",
    "countryName",
    "state",
    "countyCode",
    "county",
    "city",
    "district",
    "street",
    "postalCode",
    "houseNumber",
}
HERE_ITEM = {
    "title",
    "id",
    "resultType",
    "houseNumberType",
    "address",
    "position",
    "access",
    "distance",
    "mapView",
}
MAPBOX_FEATURE = {
    "id",
    "type",
    "place_type",
    "relevance",
    "properties",
    "text",
    "place_name",
    "center",
    "geometry",
    "address",
    "context",
}


def assert_here_item(item: dict) -> None:
    """Every field of spec 2.7 ``geocoder_a`` items, with its type."""
    assert set(item) == HERE_ITEM
    for name in ("title", "id", "resultType", "houseNumberType"):
        assert isinstance(item[name], str)
    assert set(item["address"]) == HERE_ADDRESS
    assert all(isinstance(v, str) for v in item["address"].values())
    assert set(item["position"]) == {"lat", "lng"}
    assert all(isinstance(v, float) for v in item["position"].values())
    assert all(set(a) == {"lat", "lng"} for a in item["access"])
    assert isinstance(item["distance"], int | float)
    assert set(item["mapView"]) == {"west", "south", "east", "north"}


def assert_mapbox(body: dict, x: float, y: float) -> None:
    """Every field of spec 2.7 ``map``, with its type."""
    assert set(body) == {"type", "query", "features", "attribution"}
    assert body["type"] == "FeatureCollection"
    assert body["query"] == [x, y]
    assert isinstance(body["attribution"], str)
    assert body["attribution"]
    for f in body["features"]:
        assert set(f) == MAPBOX_FEATURE
        assert f["type"] == "Feature"
        assert all(isinstance(t, str) for t in f["place_type"])
        assert isinstance(f["relevance"], int | float)
        assert set(f["properties"]) == {"accuracy", "geocoder_b_id"}
        assert f["geometry"]["type"] == "Point"
        assert f["geometry"]["coordinates"] == f["center"]
        assert isinstance(f["address"], str)
        assert all(set(c) == {"id", "text"} for c in f["context"])


def test_geocode_from_nominatim(pclient: TestClient) -> None:
    r = pclient.get("/api-user/geocode", params={"q": "Khreshchatyk 12", "lang": "uk", "limit": 5})
    assert r.status_code == 200
    body = r.json()
    assert body["type"] == "FeatureCollection"
    assert body["query"] == {"q": "Khreshchatyk 12", "lang": "uk", "limit": 5, "bbox": None}
    assert "OpenStreetMap" in body["attribution"]
    house, city = body["features"]
    assert house == {
        "type": "Feature",
        "id": "nominatim:way/24587226",
        "geometry": {"type": "Point", "coordinates": [30.5241361, 50.4500336]},
        "bbox": [30.5238, 50.4498, 30.5245, 50.4502],
        "properties": {
            "name": "Khreshchatyk Street 12",
            "label": "12, Khreshchatyk Street, Pecherskyi District, Kyiv, 01001, Ukraine",
            "type": "building",
            "address": {
                "house_number": "12",
                "street": "Khreshchatyk Street",
                "postcode": "01001",
                "district": "Pecherskyi District",
                "city": "Kyiv",
                "county": "",
                "state": "",
                "country": "Ukraine",
                "country_code": "UA",
            },
        },
    }
    assert city["properties"]["name"] == "Kyiv"
    assert city["properties"]["type"] == "city"
    (call,) = fakes.CALLS["nominatim"]
    assert call[1] == "/nominatim/search"
    assert call[2]["format"] == "jsonv2"
    assert call[2]["accept-language"] == "uk"
    assert call[2]["limit"] == "5"


def test_geocode_bbox_and_no_result(pclient: TestClient) -> None:
    r = pclient.get("/api-user/geocode", params={"q": "nowhere", "bbox": "30,50,31,51"})
    assert r.status_code == 200
    assert r.json()["features"] == []
    assert r.json()["query"]["bbox"] == [30, 50, 31, 51]
    query = fakes.CALLS["nominatim"][0][2]
    assert query["viewbox"] == "30.0,51.0,31.0,50.0"  # Nominatim's order: x1,y1,x2,y2
    assert query["bounded"] == "1"


def test_geocode_from_photon(psettings: Settings) -> None:
    with app_client(psettings.model_copy(update={"geocode_provider": "photon"})) as tc:
        r = tc.get("/api-user/geocode", params={"q": "Khreshchatyk", "bbox": "30,50,31,51"})
    assert r.status_code == 200
    (f,) = r.json()["features"]
    assert f["id"] == "photon:way/24587226"
    assert f["bbox"] == [30.5238, 50.4498, 30.5245, 50.4502]
    assert f["properties"]["label"] == "Khreshchatyk Street 12, 01001 Kyiv, Kyiv, Ukraine"
    assert f["properties"]["type"] == "house"
    assert f["properties"]["address"]["country_code"] == "UA"
    assert fakes.CALLS["photon"][0][2]["bbox"] == "30.0,50.0,31.0,51.0"


def test_geocode_is_cached(pclient: TestClient) -> None:
    for _ in range(3):
        assert pclient.get("/api-user/geocode", params={"q": "Kyiv"}).status_code == 200
    assert len(fakes.CALLS["nominatim"]) == 1
    assert pclient.get("/api-user/geocode", params={"q": "Kyiv", "nocache": 1}).status_code == 200
    assert len(fakes.CALLS["nominatim"]) == 2


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({}, "q"),
        ({"q": "  "}, "q"),
        ({"q": "a", "limit": "0"}, "limit"),
        ({"q": "a", "limit": "51"}, "limit"),
        ({"q": "a", "limit": "ten"}, "limit"),
        ({"q": "a" * 501}, "q"),
        ({"q": "a", "bbox": "1,2,3"}, "bbox"),
        ({"q": "a", "bbox": "10,0,5,1"}, "bbox"),
        ({"q": "a", "lang": "english!"}, "lang"),
    ],
)
def test_geocode_bad_input(pclient: TestClient, params: dict, parameter: str) -> None:
    r = pclient.get("/api-user/geocode", params=params)
    assert r.status_code == 400
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == parameter
    assert not fakes.CALLS


def test_geocode_defaults_and_blanks(pclient: TestClient) -> None:
    """At most 10 places unless asked; blanks around ``q`` do not count."""
    r = pclient.get("/api-user/geocode", params={"q": "  Khreshchatyk 12 "})
    assert r.status_code == 200
    assert r.json()["query"] == {"q": "Khreshchatyk 12", "lang": "en", "limit": 10, "bbox": None}


def test_geocode_not_configured(bare_client: TestClient) -> None:
    r = bare_client.get("/api-user/geocode", params={"q": "Kyiv"})
    assert r.status_code == 503
    error = assert_error(r.json(), "not-configured")
    assert "MAPSVC_NOMINATIM_URL" in error["message"]


def test_reverse_from_native_providers(pclient: TestClient) -> None:
    r = pclient.get("/api-user/reverse-geocode", params={"x": 30.5241361, "y": 50.4500336})
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"geocoder_a", "map"}
    (item,) = body["geocoder_a"]["items"]
    assert_here_item(item)
    expected = dict(fakes.HERE_ITEM)
    expected["address"] = {k: v for k, v in expected["address"].items() if k != "stateCode"}
    assert item == expected
    assert_mapbox(body["map"], 30.52414, 50.45003)
    (f,) = body["map"]["features"]
    assert f["properties"] == {"accuracy": "rooftop", "geocoder_b_id": "dXJuOm1ieGFkcjo0MzU2"}
    assert f["context"][0] == {"id": "postcode.8513", "text": "01001"}
    assert (f["text"], f["address"], f["id"]) == (
        "Khreshchatyk Street",
        "12",
        "address.4356035406756260",
    )
    assert body["map"]["attribution"] == fakes.MAPBOX_ATTRIBUTION
    here_query = fakes.CALLS["here"][0][2]
    assert here_query["at"] == "50.45003,30.52414"  # rounded to 5 decimals
    assert (
        fakes.CALLS["mapbox"][0][1] == "/mapbox/geocoding/v5/mapbox.places/30.52414,50.45003.json"
    )


@pytest.mark.parametrize("keyless", ["nominatim", "photon"])
def test_reverse_from_keyless_providers(psettings: Settings, keyless: str) -> None:
    update = {"reverse_a_provider": keyless, "reverse_b_provider": keyless}
    with app_client(psettings.model_copy(update=update)) as tc:
        r = tc.get("/api-user/reverse-geocode", params={"x": 30.5241, "y": 50.45})
    assert r.status_code == 200
    body = r.json()
    (item,) = body["geocoder_a"]["items"]
    assert_here_item(item)
    assert item["resultType"] == "houseNumber"
    assert item["houseNumberType"] == "PA"
    assert item["address"]["street"] == "Khreshchatyk Street"
    assert item["address"]["houseNumber"] == "12"
    assert item["address"]["city"] == "Kyiv"
    assert item["address"]["postalCode"] == "01001"
    assert item["address"]["countryCode"] == "UA"
    assert item["position"] == {"lat": 50.4500336, "lng": 30.5241361}
    assert 0 < item["distance"] < 10
    assert item["mapView"] == {"west": 30.5238, "south": 50.4498, "east": 30.5245, "north": 50.4502}
    assert_mapbox(body["map"], 30.5241, 50.45)
    (f,) = body["map"]["features"]
    assert f["place_type"] == ["address"]
    assert (f["text"], f["address"]) == ("Khreshchatyk Street", "12")
    assert f["properties"] == {"accuracy": "rooftop", "geocoder_b_id": "way/24587226"}
    assert {"id": "postcode.way/24587226", "text": "01001"} in f["context"]
    assert f["center"] == [30.5241361, 50.4500336]
    calls = len(fakes.CALLS[keyless])
    assert calls == 1  # both keys asked the same question at once: one call
    with app_client(psettings.model_copy(update=update)) as tc:
        assert tc.get("/api-user/reverse-geocode", params={"x": 30.5241, "y": 50.45}).json() == body
    assert len(fakes.CALLS[keyless]) == calls  # then both from the cache


def test_reverse_nothing_there(psettings: Settings) -> None:
    update = {"reverse_a_provider": "nominatim", "reverse_b_provider": "nominatim"}
    with app_client(psettings.model_copy(update=update)) as tc:
        r = tc.get("/api-user/reverse-geocode", params={"x": 0, "y": -85})
    assert r.status_code == 200
    assert r.json()["geocoder_a"] == {"items": []}
    assert r.json()["map"]["features"] == []


def test_reverse_native_nothing_there(pclient: TestClient) -> None:
    r = pclient.get("/api-user/reverse-geocode", params={"x": 0, "y": -85})
    assert r.status_code == 200
    assert r.json()["geocoder_a"] == {"items": []}  # HERE's own 400: an empty answer


def test_reverse_one_key_fails(pclient: TestClient) -> None:
    fakes.MODE["mapbox"] = "garbage"
    r = pclient.get("/api-user/reverse-geocode", params={"x": 30.5, "y": 50.4})
    assert r.status_code == 200
    body = r.json()
    assert_here_item(body["geocoder_a"]["items"][0])
    error = body["map"]["error"]
    assert error["code"] == "upstream-bad-answer"
    assert error["status"] == 520
    assert error["detail"] == {"provider": "mapbox", "status": 200}


def test_reverse_unconfigured_key_is_an_error_object(psettings: Settings) -> None:
    with app_client(with_providers(psettings, mapbox={"api_key": None})) as tc:
        r = tc.get("/api-user/reverse-geocode", params={"x": 30.5, "y": 50.4})
    assert r.status_code == 200
    assert r.json()["map"]["error"]["code"] == "not-configured"
    assert r.json()["map"]["error"]["status"] == 503
    assert r.json()["geocoder_a"]["items"]


def test_reverse_wrong_key_is_an_upstream_error(psettings: Settings) -> None:
    with app_client(with_providers(psettings, here={"api_key": SecretStr("wrong")})) as tc:
        r = tc.get("/api-user/reverse-geocode", params={"x": 30.5, "y": 50.4})
    assert r.json()["geocoder_a"]["error"]["code"] == "upstream-error"
    assert r.json()["geocoder_a"]["error"]["status"] == 502
    assert "wrong" not in r.text


def test_reverse_both_fail(bare_client: TestClient) -> None:
    r = bare_client.get("/api-user/reverse-geocode", params={"x": 30.5, "y": 50.4})
    assert r.status_code == 503
    assert_error(r.json(), "not-configured")


def test_reverse_keys_run_concurrently(pclient: TestClient) -> None:
    fakes.MODE["here"] = fakes.MODE["mapbox"] = "slow"  # each past the 1 s timeout
    r = pclient.get("/api-user/reverse-geocode", params={"x": 30.5, "y": 50.4})
    assert r.status_code == 524
    # asked at once: both calls reach their fakes together, not one timeout (1 s) apart
    (here,) = fakes.CALLS["here"]
    (mapbox,) = fakes.CALLS["mapbox"]
    assert abs(here[0] - mapbox[0]) < 0.5


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"y": 50}, "x"),
        ({"x": 30}, "y"),
        ({"x": "abc", "y": 50}, "x"),
        ({"x": "nan", "y": 50}, "x"),
        ({"x": "inf", "y": 50}, "x"),
        ({"x": 30, "y": "-Infinity"}, "y"),
        ({"x": 181, "y": 50}, "x"),
        ({"x": 30, "y": -90.5}, "y"),
        ({"x": 30, "y": ""}, "y"),
    ],
)
def test_reverse_bad_input(pclient: TestClient, params: dict, parameter: str) -> None:
    r = pclient.get("/api-user/reverse-geocode", params=params)
    assert r.status_code == 400
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == parameter
    assert not fakes.CALLS
