"""Provider endpoints: geocode, reverse-geocode, map-route, weather, height, proxy, dzk.

Spec 2.7–2.10 and 4.10–4.16; the work is in ``shared/providers``, the handlers pick the
configured provider and shape the answer.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, StringConstraints, WithJsonSchema
from pydantic_core import PydanticCustomError
from starlette.background import BackgroundTask
from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.access import Rule
from api.endpoint import Endpoint, Handler
from api.errors import status_of
from api.fields import Box, Flag, Lang, Query, Text
from api.openapi.answers import json_body
from api.openapi.models import Elevations, Feature, Parcel, Places, Weather
from api.openapi.models import ReverseGeocode as ReverseGeocodeAnswer
from api.services import services
from shared import parcels
from shared.errors import InvalidInputError, MapsvcError
from shared.params import PAIR_PATTERN, Bbox, parse_bbox
from shared.providers import cadastre, elevation, geocoding, proxy, routing, weather
from shared.providers.config import provider
from shared.providers.geocoders import GeocodeQuery
from shared.providers.geocoding import ReverseGeocode
from shared.providers.routing import RouteQuery

__all__ = ["ENDPOINTS", "ProxyHeadersMiddleware"]

#: the errors of a route that asks a provider
_PROVIDER_ERRORS = (502, 503, 520, 521, 522, 524)
_READER = Rule("reader")
LonLat = tuple[float, float]
#: text whose surrounding blanks do not count
_Stripped = Annotated[str, StringConstraints(strip_whitespace=True)]
_NOCACHE = "1: bypass the cache and compute afresh"
_LANG = "Label language (a configured language tag)"


def _profile(value: str) -> str:
    """``value`` if it is a travel mode (else refused as an enum: the message lists them)."""
    if value not in routing.PROFILES:
        raise PydanticCustomError(
            "enum", "not a profile", {"expected": ", ".join(routing.PROFILES)}
        )
    return value


#: a travel mode of ``map-route``
Profile = Annotated[
    str,
    AfterValidator(_profile),
    WithJsonSchema({"type": "string", "enum": list(routing.PROFILES)}),
]


def _lon_lats(text: str, separator: str, parameter: str, *, lat_first: bool) -> tuple[LonLat, ...]:
    """``(lon, lat)`` of each pair of a list parameter its pattern matched (``lon,lat`` pairs,
    or ``lat,lng`` ones).

    Raises:
        InvalidInputError: a pair outside the earth.
    """
    shape = "-90..90, -180..180" if lat_first else "-180..180, -90..90"
    found = []
    for pair in text.split(separator):
        first, second = (float(v) for v in pair.split(","))
        lon, lat = (second, first) if lat_first else (first, second)
        if abs(lon) > 180 or abs(lat) > 90:
            raise InvalidInputError(f"{pair!r} is outside {shape}", parameter=parameter, value=pair)
        found.append((lon, lat))
    return tuple(found)


def _point(x_name: str, x: float | None, y_name: str, y: float | None) -> LonLat:
    """The point of two optional parameters, both required here.

    Raises:
        InvalidInputError: one is missing (naming it).
    """
    if x is None:
        raise InvalidInputError(f"{x_name} is required", parameter=x_name)
    if y is None:
        raise InvalidInputError(f"{y_name} is required", parameter=y_name)
    return x, y


class PlacesQuery(Query):
    """Places by name: the text, language, how many, inside which box."""

    q: _Stripped = Text(500, description="What to look for", examples=["Khreshchatyk 12"])
    lang: Lang = Field("", description=_LANG)
    limit: int = Field(10, ge=1, le=50, description="Most results")
    bbox: Box | None = Field(None, description="Only inside west,south,east,north")
    nocache: Flag = Field(False, description=_NOCACHE)

    def box(self) -> Bbox | None:
        """The box to search in, or None.

        Raises:
            InvalidInputError: min >= max, or outside -180..180, -90..90.
        """
        return None if self.bbox is None else parse_bbox(self.bbox, "bbox")


class PointQuery(Query):
    """A point given as ``x`` (longitude) and ``y`` (latitude), EPSG:4326."""

    x: float = Field(ge=-180, le=180, description="Longitude, EPSG:4326", examples=[30.5241])
    y: float = Field(ge=-90, le=90, description="Latitude, EPSG:4326", examples=[50.45])
    lang: Lang = Field("", description=_LANG)
    nocache: Flag = Field(False, description=_NOCACHE)


class MapRouteQuery(Query):
    """A route: its points, travel mode and what to add."""

    points: str = Text(
        2000,
        pattern=rf"^{PAIR_PATTERN}(;{PAIR_PATTERN}){{1,{routing.MAX_ROUTE_POINTS - 1}}}$",
        description=f"2..{routing.MAX_ROUTE_POINTS} lon,lat pairs separated by ';'",
        examples=["30.5,50.4;30.6,50.45"],
    )
    profile: Profile = Field("car", description="Travel mode")
    steps: Flag = Field(False, description="1: add the turn-by-turn steps")
    alternatives: Flag = Field(False, description="1: add alternative routes")
    nocache: Flag = Field(False, description=_NOCACHE)

    def route(self) -> RouteQuery:
        """The routing question.

        Raises:
            InvalidInputError: a point outside the earth.
        """
        points = _lon_lats(self.points, ";", "points", lat_first=False)
        return RouteQuery(points, self.profile, self.steps, self.alternatives, self.nocache)


class HeightQuery(Query):
    """Points of an elevation call: ``x``/``y``, or ``locations=lat,lng|lat,lng…``."""

    x: float | None = Field(
        None, ge=-180, le=180, description="Longitude, EPSG:4326 (with y)", examples=[-109.2]
    )
    y: float | None = Field(
        None, ge=-90, le=90, description="Latitude, EPSG:4326 (with x)", examples=[10.3]
    )
    locations: str | None = Text(
        5000,
        default=None,
        pattern=rf"^{PAIR_PATTERN}(\|{PAIR_PATTERN}){{0,{elevation.MAX_POINTS - 1}}}$",
        description=f"1..{elevation.MAX_POINTS} lat,lng pairs separated by '|'",
    )
    nocache: Flag = Field(False, description=_NOCACHE)

    def lon_lats(self) -> tuple[LonLat, ...]:
        """The points, ``(lon, lat)``: of ``locations`` (Open Topo Data's form), else ``x``, ``y``.

        Raises:
            InvalidInputError: neither ``locations`` nor both ``x`` and ``y``; a location
                outside the earth.
        """
        if self.locations is not None:
            return _lon_lats(self.locations, "|", "locations", lat_first=True)
        return (_point("x", self.x, "y", self.y),)


class ProxyQuery(Query):
    """The URL to fetch."""

    url: str = Text(
        4000,
        description="http(s) URL on an allowed host",
        examples=["https://tiles.example.org/0/0/0.png"],
    )


class ParcelQuery(Query):
    """A parcel lookup: by cadastral number, or by a point; the number wins when both come."""

    cad_num: _Stripped | None = Field(
        None,
        pattern=parcels.CADNUM.pattern,
        description="Cadastral number",
        examples=["3222486200:03:001:0001"],
    )
    cad_num_camel: _Stripped | None = Field(
        None,
        alias="cadNum",
        pattern=parcels.CADNUM.pattern,
        description="Alternative spelling of `cad_num`",
    )
    lng: float | None = Field(None, ge=-180, le=180, description="Longitude, EPSG:4326 (with lat)")
    lat: float | None = Field(None, ge=-90, le=90, description="Latitude, EPSG:4326 (with lng)")
    nocache: Flag = Field(False, description=_NOCACHE)

    @property
    def cadnum(self) -> str | None:
        """The cadastral number asked for, or None."""
        return self.cad_num or self.cad_num_camel

    def point(self) -> LonLat | None:
        """The point asked for, ``(lng, lat)``; None when a number is.

        Raises:
            InvalidInputError: neither a number nor both ``lng`` and ``lat``.
        """
        if self.cadnum is not None:
            return None
        if self.lng is None and self.lat is None:
            raise InvalidInputError("give cad_num, or lng and lat", parameter="cad_num")
        return _point("lng", self.lng, "lat", self.lat)


async def get_geocode(request: Request, query: PlacesQuery) -> JSONResponse:
    """Places by name: a GeoJSON FeatureCollection.

    Spec 4.10, docs/api/providers.md.
    """
    svc = services(request)
    asked = GeocodeQuery(query.q, query.lang, query.limit, query.box(), query.nocache)
    chosen = provider(svc.settings, svc.settings.sources.geocode_provider)
    return JSONResponse(await geocoding.forward_geocode(svc.upstream, chosen, asked))


def _error_object(error: MapsvcError) -> dict[str, Any]:
    return {
        "error": {
            "code": error.code,
            "status": status_of(error),
            "message": error.message,
            "detail": error.detail,
        }
    }


async def get_reverse_geocode(request: Request, query: PointQuery) -> JSONResponse:
    """Places at a point from two geocoders (spec 2.7).

    ``geocoder_a`` and ``map`` are asked concurrently; a failed one holds an error.
    """
    svc = services(request)
    settings, upstream = svc.settings, svc.upstream

    async def ask(reverse: ReverseGeocode, choice: str) -> dict[str, Any]:
        chosen = provider(settings, choice)
        return await reverse(
            upstream, chosen, query.x, query.y, lang=query.lang, refresh=query.nocache
        )

    a, b = settings.sources.reverse_a_provider, settings.sources.reverse_b_provider
    answers = await asyncio.gather(
        ask(geocoding.reverse_geocoder_a, a), ask(geocoding.reverse_map, b), return_exceptions=True
    )
    errors = [a for a in answers if isinstance(a, BaseException)]
    for error in errors:
        if not isinstance(error, MapsvcError):
            raise error  # a bug: the usual 500
    if len(errors) == 2:
        raise errors[0]  # nothing to answer: the first key's error, with its status
    body = {
        key: _error_object(a) if isinstance(a, MapsvcError) else a
        for key, a in zip(("geocoder_a", "map"), answers, strict=True)
    }
    return JSONResponse(body)


async def get_map_route(request: Request, query: MapRouteQuery) -> JSONResponse:
    """A route through points: a GeoJSON Feature.

    Spec 4.12, docs/api/providers.md.
    """
    asked, svc = query.route(), services(request)
    chosen = provider(svc.settings, svc.settings.sources.route_provider)
    return JSONResponse(await routing.route(svc.upstream, chosen, asked))


async def get_weather(request: Request, query: PointQuery) -> JSONResponse:
    """The current weather at a point (spec 2.8).

    Spec 4.13.
    """
    svc = services(request)
    body = await weather.current_weather(
        svc.upstream,
        provider(svc.settings, "owm"),
        query.x,
        query.y,
        lang=query.lang,
        refresh=query.nocache,
    )
    return JSONResponse(body)


async def get_height(request: Request, query: HeightQuery) -> JSONResponse:
    """Elevations of points (spec 2.9): ``x`` and ``y``, or ``locations``.

    Spec 4.14: from local DEMs and/or the elevation provider.
    """
    svc = services(request)
    points = query.lon_lats()
    settings = svc.settings
    source = settings.sources.height_source
    body = await elevation.elevations(
        list(points),
        source=source,
        catalog=svc.dem,
        upstream=svc.upstream,
        provider=provider(settings, "opentopodata") if source != "dem" else None,
        dataset=settings.sources.opentopodata_dataset,
        refresh=query.nocache,
    )
    return JSONResponse(body)


async def get_url_proxy(request: Request, query: ProxyQuery) -> StreamingResponse:
    """Fetch a URL of an allowed host for the client, streamed.

    Spec 4.15, docs/api/providers.md "gis-url-proxy".
    """
    svc = services(request)
    answer = await proxy.fetch(svc.proxy_http, svc.proxy_policy, query.url, request.headers)
    # closing again after the stream is harmless; it frees the connection if it never started
    return StreamingResponse(
        answer.body,
        status_code=answer.status,
        headers=answer.headers,
        background=BackgroundTask(answer.aclose),
    )


#: a fetched document opened as a page (an SVG, an XML file) runs no script, loads nothing
_SANDBOX = "default-src 'none'; style-src 'unsafe-inline'; sandbox"


class ProxyHeadersMiddleware:
    """Headers of every ``gis-url-proxy`` answer, errors too: no sniffing, a sandbox, CORS.

    ``Access-Control-Allow-Origin`` is sent only to an origin of ``MAPSVC_PROXY_CORS_ORIGINS``
    (echoed, with ``Vary: Origin``), or as ``*`` when the setting is ``*``.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: D102
        policy: proxy.ProxyPolicy = services(HTTPConnection(scope)).proxy_policy
        allowed = policy.cors_origin(Headers(scope=scope).get("origin"))

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["X-Content-Type-Options"] = "nosniff"
                headers["Content-Security-Policy"] = _SANDBOX
                if policy.cors_origins and "*" not in policy.cors_origins:
                    headers.add_vary_header("Origin")
                if allowed is not None:
                    headers["Access-Control-Allow-Origin"] = allowed
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def get_parcel(request: Request, query: ParcelQuery) -> JSONResponse:
    """A land parcel by cadastral number or by point (spec 2.10).

    Spec 4.16: the local table first, then the provider.
    """
    svc = services(request)
    found = await cadastre.find_parcel(
        svc.db,
        svc.upstream,
        svc.settings,
        cadnum=query.cadnum,
        point=query.point(),
        refresh=query.nocache,
    )
    return JSONResponse({"success": True, "result": found})


#: an endpoint of a provider: a reader's GET that spends the providers budget; it answers
#: ``404`` when the provider finds nothing, and relays the provider's failures
_endpoint = functools.partial(
    Endpoint,
    "GET",
    rule=_READER,
    budget="providers",
    errors=(404, *_PROVIDER_ERRORS),
    tag="providers",
)


def _provider(
    path: str,
    handler: Handler,
    query: type[Query],
    model: type[BaseModel],
    said: str,
    **declared: Any,
) -> Endpoint:
    """An endpoint of a provider that answers ``model`` (``said`` describes it)."""
    return _endpoint(path, handler, query=query, answer={"200": json_body(model, said)}, **declared)


ENDPOINTS = [
    _provider(
        "/geocode",
        get_geocode,
        PlacesQuery,
        Places,
        "The places",
        errors=_PROVIDER_ERRORS,
    ),
    _provider(
        "/reverse-geocode", get_reverse_geocode, PointQuery, ReverseGeocodeAnswer, "Both answers"
    ),
    _provider("/map-route", get_map_route, MapRouteQuery, Feature, "The route"),
    _provider("/weather", get_weather, PointQuery, Weather, "The weather", errors=_PROVIDER_ERRORS),
    _provider("/height", get_height, HeightQuery, Elevations, "The elevations"),
    _endpoint(
        "/gis-url-proxy",
        get_url_proxy,
        query=ProxyQuery,
        answer={"200": {"description": "The fetched body, with its status and content type"}},
        errors=(403, 404, *_PROVIDER_ERRORS),
        middleware=(Middleware(ProxyHeadersMiddleware),),  # its refusals too
    ),
    *(
        _provider(path, get_parcel, ParcelQuery, Parcel, "The parcel", name=name)
        for path, name in (("/dzk", "get_parcel"), ("/dzk.api", "get_parcel_api"))
    ),
]
