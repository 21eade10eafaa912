"""Fake providers on loopback that answer in each provider's real wire format.

One Starlette app serves every provider under its own prefix (``/nominatim``, ``/here``, …);
tests set a provider's ``mode`` and read its ``calls`` directly (the server runs in a thread
of the test process). A raw socket server answers by resetting the connection.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
from collections import defaultdict
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

# What each provider answers; "ok" unless a test says otherwise.
MODE: dict[str, str] = defaultdict(lambda: "ok")
# (monotonic time, path, query) of every call each provider saw
CALLS: dict[str, list[tuple[float, str, dict[str, str]]]] = defaultdict(list)

NOMINATIM_PLACE: dict[str, Any] = {
    "place_id": 132437288,
    "licence": "Data © OpenStreetMap contributors, ODbL 1.0. http://osm.org/copyright",
    "osm_type": "way",
    "osm_id": 24587226,
    "lat": "50.4500336",
    "lon": "30.5241361",
    "category": "building",
    "type": "yes",
    "place_rank": 30,
    "importance": 0.00001,
    "addresstype": "building",
    "name": "",
    "display_name": "12, Khreshchatyk Street, Pecherskyi District, Kyiv, 01001, Ukraine",
    "address": {
        "house_number": "12",
        "road": "Khreshchatyk Street",
        "city_district": "Pecherskyi District",
        "city": "Kyiv",
        "ISO3166-2-lvl4": "UA-30",
        "postcode": "01001",
        "country": "Ukraine",
        "country_code": "ua",
    },
    "boundingbox": ["50.4498", "50.4502", "30.5238", "30.5245"],
}
NOMINATIM_CITY: dict[str, Any] = {
    **NOMINATIM_PLACE,
    "osm_type": "relation",
    "osm_id": 421866,
    "category": "boundary",
    "type": "administrative",
    "addresstype": "city",
    "name": "Kyiv",
    "display_name": "Kyiv, Ukraine",
    "address": {"city": "Kyiv", "country": "Ukraine", "country_code": "ua"},
    "boundingbox": ["50.213", "50.590", "30.239", "30.825"],
}
PHOTON_FEATURE: dict[str, Any] = {
    "type": "Feature",
    "geometry": {"type": "Point", "coordinates": [30.5241361, 50.4500336]},
    "properties": {
        "osm_type": "W",
        "osm_id": 24587226,
        "osm_key": "building",
        "osm_value": "yes",
        "type": "house",
        "housenumber": "12",
        "street": "Khreshchatyk Street",
        "postcode": "01001",
        "district": "Pecherskyi District",
        "city": "Kyiv",
        "state": "Kyiv",
        "country": "Ukraine",
        "countrycode": "UA",
        "extent": [30.5238, 50.4502, 30.5245, 50.4498],
    },
}
HERE_ITEM: dict[str, Any] = {
    "title": "Khreshchatyk St 12, 01001 Kyiv, Ukraine",
    "id": "here:af:streetsection:abc",
    "resultType": "houseNumber",
    "houseNumberType": "PA",
    "address": {
        "label": "Khreshchatyk St 12, 01001 Kyiv, Ukraine",
        "countryCode": "UKR",
        "countryName": "Ukraine",
        "stateCode": "KV",
        "state": "Kyiv City",
        "countyCode": "KV",
        "county": "Kyiv",
        "city": "Kyiv",
        "district": "Pecherskyi",
        "street": "Khreshchatyk St",
        "postalCode": "01001",
        "houseNumber": "12",
    },
    "position": {"lat": 50.45003, "lng": 30.52414},
    "access": [{"lat": 50.45011, "lng": 30.52395}],
    "distance": 3,
    "mapView": {"west": 30.5238, "south": 50.4498, "east": 30.5245, "north": 50.4502},
}
MAPBOX_FEATURE: dict[str, Any] = {
    "id": "address.4356035406756260",
    "type": "Feature",
    "place_type": ["address"],
    "relevance": 1,
    "properties": {"accuracy": "rooftop", "mapbox_id": "dXJuOm1ieGFkcjo0MzU2"},
    "text": "Khreshchatyk Street",
    "place_name": "12 Khreshchatyk Street, Kyiv, Kyiv 01001, Ukraine",
    "center": [30.524136, 50.450034],
    "geometry": {"type": "Point", "coordinates": [30.524136, 50.450034]},
    "address": "12",
    "context": [
        {"id": "postcode.8513", "mapbox_id": "dXJuOm1ieHBsYzpB", "text": "01001"},
        {"id": "place.1234", "mapbox_id": "dXJuOm1ieHBsYzpC", "wikidata": "Q1899", "text": "Kyiv"},
        {"id": "country.8772", "short_code": "ua", "wikidata": "Q212", "text": "Ukraine"},
    ],
}
MAPBOX_ATTRIBUTION = "NOTICE: © 2026 Mapbox and its suppliers. All rights reserved."


def _record(name: str, request: Request) -> str:
    CALLS[name].append((time.monotonic(), request.url.path, dict(request.query_params)))
    return MODE[name]


async def _faulty(mode: str) -> Response | None:
    """The answer of a fault mode, or None to answer normally."""
    if mode == "slow":
        await asyncio.sleep(3)
    if mode == "500":
        return PlainTextResponse("Internal Server Error", status_code=500)
    if mode == "502":
        return PlainTextResponse("<html>Bad Gateway</html>", status_code=502)
    if mode == "garbage":
        return PlainTextResponse("<html><body>maintenance</body></html>", status_code=200)
    if mode == "truncated":
        return Response(b'{"items": [{"title": ', media_type="application/json")
    return None


def _fail_once(name: str) -> bool:
    """In mode ``500once``, the first call of the provider fails."""
    return MODE[name] == "500once" and len(CALLS[name]) == 1


async def nominatim_search(request: Request) -> Response:
    mode = _record("nominatim", request)
    if (r := await _faulty(mode)) is not None:
        return r
    if _fail_once("nominatim"):
        return PlainTextResponse("busy", status_code=503)
    if request.query_params.get("format") != "jsonv2":
        return JSONResponse({"error": {"code": 400, "message": "bad format"}}, status_code=400)
    q = request.query_params.get("q", "")
    if q == "nowhere":
        return JSONResponse([])
    limit = int(request.query_params.get("limit", "10"))
    return JSONResponse([NOMINATIM_PLACE, NOMINATIM_CITY][:limit])


async def nominatim_reverse(request: Request) -> Response:
    mode = _record("nominatim", request)
    if (r := await _faulty(mode)) is not None:
        return r
    if float(request.query_params["lat"]) < -80:  # the sea near the pole: nothing there
        return JSONResponse({"error": "Unable to geocode"})
    return JSONResponse(NOMINATIM_PLACE)


async def photon_api(request: Request) -> Response:
    mode = _record("photon", request)
    if (r := await _faulty(mode)) is not None:
        return r
    if not request.query_params.get("q"):
        return JSONResponse({"message": "missing search term 'q'"}, status_code=400)
    return JSONResponse({"type": "FeatureCollection", "features": [PHOTON_FEATURE]})


async def photon_reverse(request: Request) -> Response:
    mode = _record("photon", request)
    if (r := await _faulty(mode)) is not None:
        return r
    return JSONResponse({"type": "FeatureCollection", "features": [PHOTON_FEATURE]})


async def here_revgeocode(request: Request) -> Response:
    mode = _record("here", request)
    if (r := await _faulty(mode)) is not None:
        return r
    if float(request.query_params["at"].split(",")[0]) < -80:
        return JSONResponse(
            {"status": 400, "title": "Illegal input for parameter 'at'", "cause": "no result"},
            status_code=400,
        )
    if request.query_params.get("apiKey") != "here-key":
        return JSONResponse(
            {"error": "Unauthorized", "error_description": "apiKey invalid. apiKey not found."},
            status_code=401,
        )
    return JSONResponse({"items": [HERE_ITEM]})


async def mapbox_places(request: Request) -> Response:
    mode = _record("mapbox", request)
    if (r := await _faulty(mode)) is not None:
        return r
    if request.query_params.get("access_token") != "mapbox-key":
        return JSONResponse({"message": "Not Authorized - Invalid Token"}, status_code=401)
    lon, lat = (float(v) for v in request.path_params["coords"].split(","))
    return JSONResponse(
        {
            "type": "FeatureCollection",
            "query": [lon, lat],
            "features": [MAPBOX_FEATURE],
            "attribution": MAPBOX_ATTRIBUTION,
        }
    )


async def osrm_route(request: Request) -> Response:
    mode = _record("osrm", request)
    if (r := await _faulty(mode)) is not None:
        return r
    coords = [
        [float(v) for v in pair.split(",")] for pair in request.path_params["coords"].split(";")
    ]
    if any(abs(lat) > 85 for _, lat in coords):
        return JSONResponse(
            {"code": "NoRoute", "message": "Impossible route between points"}, status_code=400
        )
    steps = request.query_params.get("steps") == "true"
    legs = []
    for (ax, ay), (bx, by) in zip(coords, coords[1:], strict=False):
        leg: dict[str, Any] = {
            "distance": 1000.0,
            "duration": 100.0,
            "summary": "Main St",
            "weight": 100.0,
        }
        leg["steps"] = (
            [
                {
                    "distance": 1000.0,
                    "duration": 100.0,
                    "name": "Main St",
                    "mode": "driving",
                    "geometry": {"type": "LineString", "coordinates": [[ax, ay], [bx, by]]},
                    "maneuver": {"type": "depart", "location": [ax, ay], "bearing_after": 90},
                },
                {
                    "distance": 0.0,
                    "duration": 0.0,
                    "name": "Main St",
                    "mode": "driving",
                    "geometry": {"type": "LineString", "coordinates": [[bx, by], [bx, by]]},
                    "maneuver": {"type": "arrive", "location": [bx, by], "bearing_after": 0},
                },
            ]
            if steps
            else []
        )
        legs.append(leg)
    route = {
        "geometry": {"type": "LineString", "coordinates": coords},
        "legs": legs,
        "distance": 1000.0 * len(legs),
        "duration": 100.0 * len(legs),
        "weight_name": "routability",
        "weight": 100.0 * len(legs),
    }
    routes = [route]
    if request.query_params.get("alternatives") == "true":
        routes.append({**route, "distance": route["distance"] * 1.2})
    return JSONResponse(
        {
            "code": "Ok",
            "routes": routes,
            "waypoints": [
                {"hint": "x", "distance": 1.5, "name": "Main St", "location": c} for c in coords
            ],
        }
    )


def encode_polyline6(points: list[list[float]]) -> str:
    """Valhalla's ``shape``: ``[lon, lat]`` points as a polyline with 6 decimals."""
    out = []
    prev = [0, 0]
    for lon, lat in points:
        for i, value in enumerate((round(lat * 1e6), round(lon * 1e6))):
            delta = value - prev[i]
            prev[i] = value
            delta = ~(delta << 1) if delta < 0 else delta << 1
            while delta >= 0x20:
                out.append(chr((0x20 | (delta & 0x1F)) + 63))
                delta >>= 5
            out.append(chr(delta + 63))
    return "".join(out)


def _valhalla_trip(coords: list[list[float]], scale: float) -> dict[str, Any]:
    legs = []
    for a, b in zip(coords, coords[1:], strict=False):
        legs.append(
            {
                "shape": encode_polyline6([a, b]),
                "summary": {"length": 1.0 * scale, "time": 100.0 * scale},
                "maneuvers": [
                    {
                        "type": 1,
                        "instruction": "Drive east on Main St.",
                        "street_names": ["Main St"],
                        "time": 100.0,
                        "length": 1.0,
                        "begin_shape_index": 0,
                        "end_shape_index": 1,
                        "travel_mode": "drive",
                    },
                    {
                        "type": 4,
                        "instruction": "You have arrived at your destination.",
                        "time": 0.0,
                        "length": 0.0,
                        "begin_shape_index": 1,
                        "end_shape_index": 1,
                        "travel_mode": "drive",
                    },
                ],
            }
        )
    n = len(legs)
    return {
        "locations": [{"type": "break", "lat": lat, "lon": lon} for lon, lat in coords],
        "legs": legs,
        "summary": {"length": 1.0 * n * scale, "time": 100.0 * n * scale},
        "status_message": "Found route between points",
        "status": 0,
        "units": "kilometers",
        "language": "en-US",
    }


async def valhalla_route(request: Request) -> Response:
    mode = _record("valhalla", request)
    if (r := await _faulty(mode)) is not None:
        return r
    query = json.loads(request.query_params["json"])
    coords = [[loc["lon"], loc["lat"]] for loc in query["locations"]]
    if any(abs(lat) > 85 for _, lat in coords):
        return JSONResponse(
            {
                "error_code": 442,
                "error": "No path could be found for input",
                "status_code": 400,
                "status": "Bad Request",
            },
            status_code=400,
        )
    body: dict[str, Any] = {"trip": _valhalla_trip(coords, 1.0)}
    if query.get("alternates"):
        body["alternates"] = [{"trip": _valhalla_trip(coords, 1.2)}]
    return JSONResponse(body)


OWM_BODY: dict[str, Any] = {
    "coord": {"lon": 30.5241, "lat": 50.45},
    "weather": [{"id": 803, "main": "Clouds", "description": "broken clouds", "icon": "04d"}],
    "base": "stations",
    "main": {
        "temp": 12.3,
        "feels_like": 11.1,
        "temp_min": 11.0,
        "temp_max": 13.2,
        "pressure": 1016,
        "humidity": 67,
        "sea_level": 1016,
        "grnd_level": 999,
    },
    "visibility": 10000,
    "wind": {"speed": 4.1, "deg": 250, "gust": 7.2},
    "clouds": {"all": 75},
    "dt": 1763800000,
    "sys": {"type": 2, "id": 2003742, "country": "UA", "sunrise": 1763790000, "sunset": 1763822000},
    "timezone": 7200,
    "id": 703448,
    "name": "Kyiv",
    "cod": 200,
}


async def owm_weather(request: Request) -> Response:
    mode = _record("owm", request)
    if (r := await _faulty(mode)) is not None:
        return r
    if request.query_params.get("appid") != "owm-key":
        return JSONResponse(
            {
                "cod": 401,
                "message": "Invalid API key. Please see https://openweathermap.org/faq#error401",
            },
            status_code=401,
        )
    if request.query_params.get("units") != "metric":
        return JSONResponse({**OWM_BODY, "main": {**OWM_BODY["main"], "temp": 285.45}})
    return JSONResponse(
        {
            **OWM_BODY,
            "coord": {
                "lon": float(request.query_params["lon"]),
                "lat": float(request.query_params["lat"]),
            },
        }
    )


async def opentopodata(request: Request) -> Response:
    mode = _record("opentopodata", request)
    if (r := await _faulty(mode)) is not None:
        return r
    dataset = request.path_params["dataset"]
    results = []
    for pair in request.query_params.get("locations", "").split("|"):
        lat, lng = (float(v) for v in pair.split(","))
        if abs(lat) > 90:
            return JSONResponse(
                {
                    "error": "Invalid locations argument: latitude must be in -90..90",
                    "status": "INVALID_REQUEST",
                },
                status_code=400,
            )
        elevation = None if lat < -60 else 100.0 + lat
        results.append(
            {"dataset": dataset, "elevation": elevation, "location": {"lat": lat, "lng": lng}}
        )
    return JSONResponse({"results": results, "status": "OK"})


KADASTR_PARCEL: dict[str, Any] = {
    "id": 1234567,
    "cadnum": "8000000000:72:123:0045",
    "category": "Землі житлової та громадської забудови",
    "purpose_code": "02.01",
    "purpose": "02.01 Для будівництва і обслуговування житлового будинку",
    "use": "Для будівництва і обслуговування житлового будинку",
    "area": "0.1000",
    "unit_area": "га",
    "ownershipcode": "100",
    "ownership": "Приватна власність",
    "address": "м. Київ, вул. Хрещатик, 12",
    "geometry": {
        "type": "MultiPolygon",
        "coordinates": [
            [[[30.52, 50.45], [30.53, 50.45], [30.53, 50.46], [30.52, 50.46], [30.52, 50.45]]]
        ],
    },
}


async def kadastr_parcel(request: Request) -> Response:
    mode = _record("kadastr", request)
    if (r := await _faulty(mode)) is not None:
        return r
    if request.path_params["cadnum"] != KADASTR_PARCEL["cadnum"]:
        return JSONResponse({"detail": "Not found."}, status_code=404)
    return JSONResponse(KADASTR_PARCEL)


async def kadastr_search(request: Request) -> Response:
    mode = _record("kadastr", request)
    if (r := await _faulty(mode)) is not None:
        return r
    lat = float(request.query_params["lat"])
    lng = float(request.query_params["lng"])
    hit = 30.52 <= lng <= 30.53 and 50.45 <= lat <= 50.46
    return JSONResponse({"count": int(hit), "results": [KADASTR_PARCEL] if hit else []})


async def proxied_data(request: Request) -> Response:
    _record("proxy", request)
    body = {
        "type": "FeatureCollection",
        "features": [],
        "seen_headers": dict(request.headers),
    }
    return JSONResponse(
        body,
        media_type="application/geo+json",
        headers={"Set-Cookie": "session=secret", "X-Layer": "demo", "WWW-Authenticate": "Basic"},
    )


async def proxied_redirect(request: Request) -> Response:
    _record("proxy", request)
    return Response(status_code=302, headers={"Location": request.query_params["to"]})


async def proxied_big(request: Request) -> Response:
    _record("proxy", request)
    return Response(b"x" * 4096, media_type="application/octet-stream")


async def proxied_slow(request: Request) -> Response:
    _record("proxy", request)
    await asyncio.sleep(3)
    return Response(b"late")


async def proxied_missing(request: Request) -> Response:
    _record("proxy", request)
    return PlainTextResponse("no such layer", status_code=404)


async def proxied_typed(request: Request) -> Response:
    """``body`` as media type ``type`` (none when empty), with CORS headers of its own."""
    _record("proxy", request)
    return Response(
        request.query_params.get("body", ""),
        status_code=int(request.query_params.get("status", "200")),
        media_type=request.query_params.get("type") or None,
        headers={"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Credentials": "true"},
    )


def fake_app() -> Starlette:
    """The app of every fake provider, each under its own prefix."""
    return Starlette(
        routes=[
            Route("/nominatim/search", nominatim_search),
            Route("/nominatim/reverse", nominatim_reverse),
            Route("/photon/api", photon_api),
            Route("/photon/reverse", photon_reverse),
            Route("/here/v1/revgeocode", here_revgeocode),
            Route("/mapbox/geocoding/v5/mapbox.places/{coords}.json", mapbox_places),
            Route("/osrm/route/v1/{profile}/{coords}", osrm_route),
            Route("/valhalla/route", valhalla_route),
            Route("/owm/data/2.5/weather", owm_weather),
            Route("/opentopodata/v1/{dataset}", opentopodata),
            Route("/kadastr/api/parcels/{cadnum}/", kadastr_parcel),
            Route("/kadastr/api/parcels/", kadastr_search),
            Route("/proxy/data.geojson", proxied_data),
            Route("/proxy/redirect", proxied_redirect),
            Route("/proxy/big", proxied_big),
            Route("/proxy/slow", proxied_slow),
            Route("/proxy/missing", proxied_missing),
            Route("/proxy/typed", proxied_typed),
        ]
    )


class ResetServer:
    """Accepts connections, reads the request, and resets the connection (RST)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port: int = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.recv(65536)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    def close(self) -> None:
        self.sock.close()
