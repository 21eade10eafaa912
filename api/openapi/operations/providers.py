"""The operations of the provider routes (``api.routes.providers``)."""

from __future__ import annotations

from api.openapi.models import (
    Elevations,
    Feature,
    FeatureCollection,
    Parcel,
    ReverseGeocode,
    Weather,
)
from api.openapi.operation import Operation, json_body
from api.openapi.parameters import (
    BOX,
    LANG,
    NOCACHE,
    PAIR,
    X,
    Y,
    flag,
    integer,
    number,
    param,
    text,
)
from shared.parcels import CADNUM
from shared.providers.elevation import MAX_POINTS
from shared.providers.routing import MAX_ROUTE_POINTS, PROFILES

__all__ = ["operations"]

_PROVIDER_ERRORS = (502, 503, 520, 521, 522, 524)


def operations() -> dict[str, Operation]:
    """The operations of the provider routes by name."""
    point = [X, Y, LANG, NOCACHE]
    return {
        "get_geocode": Operation(
            "Places by name: a GeoJSON FeatureCollection",
            "providers",
            [
                text("query", "q", "What to look for", required=True, example="Khreshchatyk 12"),
                LANG,
                integer("query", "limit", 1, 50, "Most results (default 10)"),
                text("query", "bbox", "Only inside west,south,east,north", pattern=BOX),
                NOCACHE,
            ],
            {"200": json_body(FeatureCollection, "The places")},
            _PROVIDER_ERRORS,
        ),
        "get_reverse_geocode": Operation(
            "Places at a point from two geocoders (spec 2.7)",
            "providers",
            point,
            {"200": json_body(ReverseGeocode, "Both answers")},
            (404, *_PROVIDER_ERRORS),
        ),
        "get_map_route": Operation(
            "A route through points: a GeoJSON Feature",
            "providers",
            [
                text(
                    "query",
                    "points",
                    f"2..{MAX_ROUTE_POINTS} lon,lat pairs separated by ';'",
                    pattern=rf"^{PAIR}(;{PAIR}){{1,{MAX_ROUTE_POINTS - 1}}}$",
                    required=True,
                    max_length=2000,
                    example="30.5,50.4;30.6,50.45",
                ),
                param(
                    "query",
                    "profile",
                    {"type": "string", "enum": list(PROFILES)},
                    "Travel mode (default car)",
                ),
                flag("steps", "1: add the turn-by-turn steps"),
                flag("alternatives", "1: add alternative routes"),
                NOCACHE,
            ],
            {"200": json_body(Feature, "The route")},
            (404, *_PROVIDER_ERRORS),
        ),
        "get_weather": Operation(
            "The current weather at a point (spec 2.8)",
            "providers",
            point,
            {"200": json_body(Weather, "The weather")},
            _PROVIDER_ERRORS,
        ),
        "get_height": Operation(
            "Elevations of points (spec 2.9): `x` and `y`, or `locations`",
            "providers",
            [
                number("x", -180, 180, "Longitude, EPSG:4326 (with y)", example=-109.2),
                number("y", -90, 90, "Latitude, EPSG:4326 (with x)", example=10.3),
                text(
                    "query",
                    "locations",
                    f"1..{MAX_POINTS} lat,lng pairs separated by '|'",
                    pattern=rf"^{PAIR}(\|{PAIR}){{0,{MAX_POINTS - 1}}}$",
                    max_length=5000,
                ),
                NOCACHE,
            ],
            {"200": json_body(Elevations, "The elevations")},
            (404, *_PROVIDER_ERRORS),
        ),
        "get_url_proxy": Operation(
            "Fetch a URL of an allowed host for the client, streamed",
            "providers",
            [
                text(
                    "query",
                    "url",
                    "http(s) URL on an allowed host",
                    required=True,
                    max_length=4000,
                    example="https://tiles.example.org/0/0/0.png",
                )
            ],
            {"200": {"description": "The fetched body, with its status and content type"}},
            (403, 404, *_PROVIDER_ERRORS),
        ),
        **{
            name: Operation(
                "A land parcel by cadastral number or by point (spec 2.10)",
                "providers",
                [
                    text(
                        "query",
                        "cad_num",
                        "Cadastral number",
                        pattern=CADNUM.pattern,
                        example="3222486200:03:001:0001",
                    ),
                    text(
                        "query",
                        "cadNum",
                        "Alternative spelling of `cad_num`",
                        pattern=CADNUM.pattern,
                    ),
                    number("lng", -180, 180, "Longitude, EPSG:4326 (with lat)"),
                    number("lat", -90, 90, "Latitude, EPSG:4326 (with lng)"),
                    NOCACHE,
                ],
                {"200": json_body(Parcel, "The parcel")},
                (404, *_PROVIDER_ERRORS),
            )
            for name in ("get_parcel", "get_parcel_api")
        },
    }
