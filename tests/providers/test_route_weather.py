"""map-route (OSRM) and weather (spec 2.8, OpenWeatherMap) against fake providers."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from shared.providers.routers.valhalla import decode_polyline6
from shared.settings import Settings
from tests.checks import assert_error
from tests.conftest import app_client
from tests.providers import fakes

POINTS = "30.5,50.4;30.6,50.45;30.7,50.5"


def test_route_feature(pclient: TestClient) -> None:
    r = pclient.get("/api-user/map-route", params={"points": POINTS, "profile": "bike", "steps": 1})
    assert r.status_code == 200
    f = r.json()
    assert f["type"] == "Feature"
    assert f["geometry"] == {
        "type": "LineString",
        "coordinates": [[30.5, 50.4], [30.6, 50.45], [30.7, 50.5]],
    }
    props = f["properties"]
    assert props["profile"] == "bike"
    assert props["distance"] == 2000.0
    assert props["duration"] == 200.0
    assert len(props["steps"]) == 4
    depart = props["steps"][0]
    assert set(depart) == {"distance", "duration", "name", "mode", "maneuver", "geometry"}
    assert depart["maneuver"]["type"] == "depart"
    assert depart["maneuver"]["location"] == [30.5, 50.4]
    assert [w["location"] for w in props["waypoints"]] == [
        [30.5, 50.4],
        [30.6, 50.45],
        [30.7, 50.5],
    ]
    assert "alternatives" not in props
    (call,) = fakes.CALLS["osrm"]
    assert call[1] == "/osrm/route/v1/bike/30.5,50.4;30.6,50.45;30.7,50.5"
    assert call[2] == {
        "overview": "full",
        "geometries": "geojson",
        "steps": "true",
        "alternatives": "false",
    }


def test_route_alternatives_and_no_steps(pclient: TestClient) -> None:
    r = pclient.get(
        "/api-user/map-route", params={"points": "30.5,50.4;30.6,50.45", "alternatives": 1}
    )
    props = r.json()["properties"]
    assert props["profile"] == "car"
    assert props["steps"] == []
    (alt,) = props["alternatives"]
    assert alt["type"] == "Feature"
    assert alt["properties"]["distance"] == 1200.0


def test_no_route_is_404(pclient: TestClient) -> None:
    r = pclient.get("/api-user/map-route", params={"points": "30.5,86;30.6,50.45"})
    assert r.status_code == 404
    assert "Impossible route" in assert_error(r.json(), "not-found")["message"]


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({}, "points"),
        ({"points": "30.5,50.4"}, "points"),
        ({"points": "30.5,50.4;"}, "points"),
        ({"points": "30.5,50.4;abc"}, "points"),
        ({"points": "30.5,50.4;30.6,95"}, "points"),
        ({"points": "30.5,50.4;nan,50"}, "points"),
        ({"points": ";".join(["30.5,50.4"] * 26)}, "points"),
        ({"points": POINTS, "profile": "plane"}, "profile"),
        ({"points": POINTS, "steps": "maybe"}, "steps"),
    ],
)
def test_route_bad_input(pclient: TestClient, params: dict, parameter: str) -> None:
    r = pclient.get("/api-user/map-route", params=params)
    assert r.status_code == 400
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == parameter
    assert not fakes.CALLS


def test_route_from_valhalla(psettings: Settings) -> None:
    with app_client(psettings.model_copy(update={"route_provider": "valhalla"})) as tc:
        r = tc.get(
            "/api-user/map-route",
            params={"points": POINTS, "profile": "foot", "steps": 1, "alternatives": 1},
        )
        assert r.status_code == 200
        f = r.json()
        assert f["type"] == "Feature"
        assert f["geometry"] == {
            "type": "LineString",
            "coordinates": [[30.5, 50.4], [30.6, 50.45], [30.7, 50.5]],
        }
        props = f["properties"]
        assert (props["profile"], props["distance"], props["duration"]) == ("foot", 2000.0, 200.0)
        assert len(props["steps"]) == 4
        depart = props["steps"][0]
        assert depart["maneuver"] == {
            "type": "depart",
            "modifier": "",
            "location": [30.5, 50.4],
            "bearing_after": None,
        }
        assert (depart["distance"], depart["name"], depart["mode"]) == (1000.0, "Main St", "drive")
        assert depart["geometry"]["coordinates"] == [[30.5, 50.4], [30.6, 50.45]]
        assert props["steps"][1]["maneuver"]["type"] == "arrive"
        assert [w["location"] for w in props["waypoints"]] == f["geometry"]["coordinates"]
        (alt,) = props["alternatives"]
        assert alt["properties"]["distance"] == pytest.approx(2400.0)
        query = json.loads(fakes.CALLS["valhalla"][0][2]["json"])
        assert query["costing"] == "pedestrian"
        assert query["locations"][0] == {"lon": 30.5, "lat": 50.4}
        r = tc.get("/api-user/map-route", params={"points": "30.5,86;30.6,50.45"})
        assert r.status_code == 404
        assert "No path" in assert_error(r.json(), "not-found")["message"]


def test_polyline6_round_trip() -> None:
    points = [[30.523456, 50.450001], [-120.2, 38.5], [-120.95, 40.7], [-126.453, 43.252]]
    assert decode_polyline6(fakes.encode_polyline6(points)) == points
    # the reference example of the polyline format, at 6 decimals
    assert decode_polyline6("_izlhA~rlgdF_{geC~ywl@_kwzCn`{nI") == [
        [-120.2, 38.5],
        [-120.95, 40.7],
        [-126.453, 43.252],
    ]


def test_route_not_configured(bare_client: TestClient) -> None:
    r = bare_client.get("/api-user/map-route", params={"points": POINTS})
    assert r.status_code == 503
    assert "MAPSVC_OSRM_URL" in assert_error(r.json(), "not-configured")["message"]


def test_weather(pclient: TestClient) -> None:
    r = pclient.get("/api-user/weather", params={"x": 30.5241, "y": 50.45})
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"body"}
    w = body["body"]
    assert w["coord"] == {"lon": 30.5241, "lat": 50.45}
    (cond,) = w["weather"]
    assert set(cond) >= {"id", "main", "description", "icon"}
    assert isinstance(cond["id"], int)
    assert w["base"] == "stations"
    for name in ("temp", "feels_like", "temp_min", "temp_max"):
        assert isinstance(w["main"][name], float)
    assert w["main"]["temp"] == 12.3  # °C: the call asked for metric units
    assert isinstance(w["main"]["pressure"], int)
    assert isinstance(w["main"]["humidity"], int)
    assert isinstance(w["visibility"], int)
    assert isinstance(w["wind"]["speed"], float)
    assert isinstance(w["wind"]["deg"], int)
    assert isinstance(w["clouds"]["all"], int)
    assert isinstance(w["dt"], int)
    assert set(w["sys"]) >= {"type", "id", "country", "sunrise", "sunset"}
    assert (w["timezone"], w["id"], w["name"], w["cod"]) == (7200, 703448, "Kyiv", 200)
    query = fakes.CALLS["owm"][0][2]
    assert query["units"] == "metric"
    assert query["appid"] == "owm-key"
    pclient.get("/api-user/weather", params={"x": 30.524101, "y": 50.450001})
    assert len(fakes.CALLS["owm"]) == 1  # the same point once rounded: from the cache


def test_weather_garbage_and_slow(pclient: TestClient) -> None:
    fakes.MODE["owm"] = "truncated"
    r = pclient.get("/api-user/weather", params={"x": 30.5, "y": 50.4})
    assert r.status_code == 520
    fakes.MODE["owm"] = "slow"
    r = pclient.get("/api-user/weather", params={"x": 30.5, "y": 50.4})
    assert r.status_code == 524
    assert_error(r.json(), "upstream-timeout")


def test_weather_not_configured(bare_client: TestClient) -> None:
    r = bare_client.get("/api-user/weather", params={"x": 30.5, "y": 50.4})
    assert r.status_code == 503
    assert "MAPSVC_OWM_API_KEY" in assert_error(r.json(), "not-configured")["message"]


def test_weather_bad_input(pclient: TestClient) -> None:
    r = pclient.get("/api-user/weather", params={"x": 30.5, "y": 91})
    assert r.status_code == 400
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == "y"
