"""Provider endpoints: geocode, reverse-geocode, map-route, weather, height, proxy, dzk.

Spec 2.7–2.10 and 4.10–4.16; the work is in ``shared/providers``, the handlers parse and
validate the query, pick the configured provider and shape the answer.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

from starlette.background import BackgroundTask
from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import status_of
from api.params import bbox_param, flag, int_param, lang_param, number
from api.services import services
from shared import parcels
from shared.errors import InvalidInputError, MapsvcError
from shared.providers import cadastre, elevation, geocoding, proxy, routing, weather
from shared.providers.config import provider
from shared.providers.geocoders import GeocodeQuery
from shared.providers.geocoding import ReverseGeocode
from shared.providers.routing import RouteQuery

__all__ = ["ROUTES"]


def _lon_lat(pair: str, parameter: str, *, lat_first: bool) -> tuple[float, float]:
    """``(lon, lat)`` of one ``lon,lat`` (or ``lat,lng``) pair of a list parameter."""
    shape, ranges = (
        ("lat,lng", "-90..90, -180..180") if lat_first else ("lon,lat", "-180..180, -90..90")
    )
    try:
        first, second = (float(v) for v in pair.split(","))
    except ValueError:
        raise InvalidInputError(
            f"{pair!r} is not {shape}", parameter=parameter, value=pair
        ) from None
    lon, lat = (second, first) if lat_first else (first, second)
    if not (math.isfinite(lon) and math.isfinite(lat)) or abs(lon) > 180 or abs(lat) > 90:
        raise InvalidInputError(f"{pair!r} is outside {ranges}", parameter=parameter, value=pair)
    return lon, lat


@dataclass(frozen=True)
class PointParams:
    """A point given as ``x`` (longitude) and ``y`` (latitude), EPSG:4326."""

    x: float
    y: float
    lang: str
    refresh: bool

    @classmethod
    def from_request(cls, request: Request) -> PointParams:
        """Read ``x``, ``y``, ``lang`` and ``nocache``."""
        return cls(
            x=number(request, "x", -180, 180),
            y=number(request, "y", -90, 90),
            lang=lang_param(request),
            refresh=flag(request, "nocache"),
        )


def _geocode_query(request: Request) -> GeocodeQuery:
    """``q``, ``lang``, ``limit`` (1..50, default 10), ``bbox`` and ``nocache``."""
    q = (request.query_params.get("q") or "").strip()
    if not q:
        raise InvalidInputError("q must not be empty", parameter="q")
    if len(q) > 500:
        raise InvalidInputError("q is longer than 500 characters", parameter="q")
    limit = int_param(request, "limit", 10, 1, 50)
    bbox = bbox_param(request, ("bbox",))
    return GeocodeQuery(q, lang_param(request), limit, bbox, flag(request, "nocache"))


async def get_geocode(request: Request) -> JSONResponse:
    """Places named ``q``: a GeoJSON FeatureCollection (spec 4.10, docs/api/providers.md)."""
    query, svc = _geocode_query(request), services(request)
    chosen = provider(svc.settings, svc.settings.sources.geocode_provider)
    body = await geocoding.forward_geocode(svc.upstream, chosen, query)
    return JSONResponse(body)


def _error_object(error: MapsvcError) -> dict[str, Any]:
    return {
        "error": {
            "code": error.code,
            "status": status_of(error),
            "message": error.message,
            "detail": error.detail,
        }
    }


async def get_reverse_geocode(request: Request) -> JSONResponse:
    """Spec 2.7: ``geocoder_a`` and ``map``, asked concurrently; a failed one holds an error."""
    params = PointParams.from_request(request)
    svc = services(request)
    settings, upstream = svc.settings, svc.upstream

    async def ask(reverse: ReverseGeocode, choice: str) -> dict[str, Any]:
        chosen = provider(settings, choice)
        return await reverse(
            upstream, chosen, params.x, params.y, lang=params.lang, refresh=params.refresh
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


def _route_query(request: Request) -> RouteQuery:
    """``points=lon,lat;lon,lat[;…]``, ``profile``, ``steps``, ``alternatives``, ``nocache``."""
    raw = (request.query_params.get("points") or "").strip()
    pairs = [p for p in raw.split(";") if p.strip()]
    if len(pairs) < 2:
        raise InvalidInputError(
            "points needs at least two lon,lat pairs separated by ';'", parameter="points"
        )
    if len(pairs) > routing.MAX_ROUTE_POINTS:
        raise InvalidInputError(
            f"points has more than {routing.MAX_ROUTE_POINTS} pairs", parameter="points"
        )
    points = [_lon_lat(pair, "points", lat_first=False) for pair in pairs]
    profile = request.query_params.get("profile") or "car"
    if profile not in routing.PROFILES:
        raise InvalidInputError(
            f"profile must be one of {', '.join(routing.PROFILES)}", parameter="profile"
        )
    steps, alternatives = flag(request, "steps"), flag(request, "alternatives")
    return RouteQuery(tuple(points), profile, steps, alternatives, flag(request, "nocache"))


async def get_map_route(request: Request) -> JSONResponse:
    """A route through the points: a GeoJSON Feature (spec 4.12, docs/api/providers.md)."""
    query, svc = _route_query(request), services(request)
    chosen = provider(svc.settings, svc.settings.sources.route_provider)
    return JSONResponse(await routing.route(svc.upstream, chosen, query))


async def get_weather(request: Request) -> JSONResponse:
    """The current weather at a point (spec 2.8, 4.13)."""
    params = PointParams.from_request(request)
    svc = services(request)
    body = await weather.current_weather(
        svc.upstream,
        provider(svc.settings, "owm"),
        params.x,
        params.y,
        lang=params.lang,
        refresh=params.refresh,
    )
    return JSONResponse(body)


@dataclass(frozen=True)
class HeightParams:
    """Points of an elevation call: ``x``/``y``, or ``locations=lat,lng|lat,lng…``."""

    points: tuple[tuple[float, float], ...]  # (lon, lat)
    refresh: bool

    @classmethod
    def from_request(cls, request: Request) -> HeightParams:
        """Read ``locations`` (Open Topo Data's form) or ``x`` and ``y``; and ``nocache``."""
        refresh = flag(request, "nocache")
        raw = request.query_params.get("locations")
        if raw is None:
            x, y = number(request, "x", -180, 180), number(request, "y", -90, 90)
            return cls(points=((x, y),), refresh=refresh)
        pairs = [p for p in raw.split("|") if p.strip()]
        if not pairs or len(pairs) > elevation.MAX_POINTS:
            raise InvalidInputError(
                f"locations needs 1..{elevation.MAX_POINTS} lat,lng pairs separated by '|'",
                parameter="locations",
            )
        points = [_lon_lat(pair, "locations", lat_first=True) for pair in pairs]
        return cls(points=tuple(points), refresh=refresh)


async def get_height(request: Request) -> JSONResponse:
    """Elevations of points (spec 2.9, 4.14): local DEMs and/or the elevation provider."""
    svc = services(request)
    params = HeightParams.from_request(request)
    settings = svc.settings
    source = settings.sources.height_source
    body = await elevation.elevations(
        list(params.points),
        source=source,
        catalog=svc.dem,
        upstream=svc.upstream,
        provider=provider(settings, "opentopodata") if source != "dem" else None,
        dataset=settings.sources.opentopodata_dataset,
        refresh=params.refresh,
    )
    return JSONResponse(body)


async def get_url_proxy(request: Request) -> StreamingResponse:
    """Fetch ``url`` for the client (spec 4.15, docs/api/providers.md "gis-url-proxy"), streamed."""
    url = request.query_params.get("url")
    if not url:
        raise InvalidInputError("url is required", parameter="url")
    svc = services(request)
    answer = await proxy.fetch(svc.proxy_http, svc.proxy_policy, url, request.headers)
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


@dataclass(frozen=True)
class ParcelParams:
    """A parcel lookup: by cadastral number, or by a point; the number wins when both come."""

    cadnum: str | None
    point: tuple[float, float] | None  # lng, lat
    refresh: bool

    @classmethod
    def from_request(cls, request: Request) -> ParcelParams:
        """Read ``cad_num`` (or ``cadNum``), else ``lng`` and ``lat``; and ``nocache``."""
        refresh = flag(request, "nocache")
        for name in ("cad_num", "cadNum"):
            raw = request.query_params.get(name)
            if raw is not None:
                return cls(parcels.check_cadnum(raw, name), None, refresh)
        if "lng" not in request.query_params and "lat" not in request.query_params:
            raise InvalidInputError("give cad_num, or lng and lat", parameter="cad_num")
        lng, lat = number(request, "lng", -180, 180), number(request, "lat", -90, 90)
        return cls(None, (lng, lat), refresh)


async def get_parcel(request: Request) -> JSONResponse:
    """A land parcel by number or point (spec 2.10, 4.16): local table, then the provider."""
    svc = services(request)
    params = ParcelParams.from_request(request)
    found = await cadastre.find_parcel(
        svc.db,
        svc.upstream,
        svc.settings,
        cadnum=params.cadnum,
        point=params.point,
        refresh=params.refresh,
    )
    return JSONResponse({"success": True, "result": found})


ROUTES = [
    Route("/geocode", get_geocode, methods=["GET"], name="get_geocode"),
    Route("/reverse-geocode", get_reverse_geocode, methods=["GET"], name="get_reverse_geocode"),
    Route("/map-route", get_map_route, methods=["GET"], name="get_map_route"),
    Route("/weather", get_weather, methods=["GET"], name="get_weather"),
    Route("/height", get_height, methods=["GET"], name="get_height"),
    Route(
        "/gis-url-proxy",
        get_url_proxy,
        methods=["GET"],
        name="get_url_proxy",
        middleware=[Middleware(ProxyHeadersMiddleware)],
    ),
    Route("/dzk", get_parcel, methods=["GET"], name="get_parcel"),
    Route("/dzk.api", get_parcel, methods=["GET"], name="get_parcel_api"),
]
