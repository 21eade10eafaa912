"""Vector data: GeoJSON (spec 4.8), the catalogue, a layer's TileJSON (4.9), its vector tiles."""

from __future__ import annotations

import asyncio
import functools
import gzip
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any
from urllib.parse import quote

from sqlalchemy.exc import DBAPIError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from api.access import visible_layers
from api.links import absolute_url, api_prefix, link, route_path
from api.params import bbox_param, flag, int_param
from api.services import services
from shared.tiles.grid import parse_tile
from shared.vector.catalog import VectorLayer
from shared.vector.geojson import GeoJsonParams, geojson
from shared.vector.query import (
    LayerQuery,
    check_geometry_type,
    parse_filter,
    parse_names,
)
from shared.vector.tiles import tilejson, vector_tile

__all__ = ["ROUTES"]

log = logging.getLogger("mapsvc.api")

MVT = "application/vnd.mapbox-vector-tile"
#: tiles are gzipped as they are sent: level 1 makes them 3x faster than 5 for 6% more bytes
#: (measured on tiles of 50-850 kB of points), and that CPU is PostgreSQL's on a busy host
GZIP_LEVEL = 1


async def _layer(request: Request, refresh: bool = False) -> VectorLayer:
    svc = services(request)
    return await svc.vector.layer(svc.db, request.path_params["layer"], refresh=refresh)


def _layer_query(request: Request, layer: VectorLayer) -> LayerQuery:
    q = request.query_params
    ids = q.get("id")
    return LayerQuery(
        filters=parse_filter(q.get("filter"), layer),
        props=parse_names(q.get("props"), layer, "props"),
        extent=bbox_param(request, ("extent",)),
        ids=tuple(i.strip() for i in ids.split(",") if i.strip()) if ids else None,
        geometry_type=check_geometry_type(q.get("type")),
        named_query=q.get("sql"),
    )


async def get_geojson(request: Request) -> Response:
    """Features of a layer as a GeoJSON FeatureCollection, built in PostGIS and streamed."""
    svc = services(request)
    settings = svc.settings
    layer = await _layer(request, refresh=flag(request, "reload"))
    most = settings.vector.geojson_max_features
    params = GeoJsonParams(
        query=_layer_query(request, layer),
        srid=int_param(request, "srid", 4326, 1, 2**31 - 1),
        limit=int_param(request, "limit", most, 1, most),
        offset=int_param(request, "offset", 0, 0, 2**31 - 1),
        with_geometry=request.query_params.get("geom", "1") != "0",
        debug=flag(request, "debug"),
        refresh=flag(request, "nocache") or flag(request, "reload"),
    )
    answer = await geojson(
        svc.db,
        svc.vector_cache,
        layer,
        params,
        functools.partial(link, request, route_path(request, "get_geojson", layer=layer.id)),
        timeout_ms=settings.vector.vector_statement_timeout_ms,
        buffer_bytes=settings.vector.geojson_buffer_bytes,
    )
    if isinstance(answer, bytes):
        return Response(answer, media_type="application/geo+json", headers={"X-Cache": "HIT"})
    if answer.in_memory:  # read whole: one body with its length, no stream to cap
        try:
            body = b"".join([chunk async for chunk in answer.body])
        finally:
            await answer.close()
        return Response(body, media_type="application/geo+json", headers={"X-Cache": "MISS"})
    return _CappedStream(
        answer.body,
        max_s=settings.vector.geojson_max_s,
        on_close=answer.close,
        media_type="application/geo+json",
        headers={"X-Cache": "MISS"},
    )


class _CappedStream(StreamingResponse):
    """A stream cut after ``max_s`` seconds however slowly the client reads; however it ends,
    the stream is closed and ``on_close`` runs (the database connection is released)."""

    def __init__(
        self,
        content: AsyncGenerator[bytes, None],
        *,
        max_s: float,
        on_close: Callable[[], Awaitable[None]],
        **kwargs: Any,
    ) -> None:
        super().__init__(content, **kwargs)
        self.stream, self.max_s, self.on_close = content, max_s, on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        cap = asyncio.timeout(self.max_s)
        try:
            async with cap:
                await super().__call__(scope, receive, send)
        except TimeoutError:
            if not cap.expired():
                raise
            # the response stays incomplete: the server closes the connection
            log.warning("%s cut after %s s (MAPSVC_GEOJSON_MAX_S)", scope["path"], self.max_s)
        except DBAPIError as exc:
            # the answer has begun, so no error status can be sent: it stays incomplete, and
            # the client sees the connection close (a statement timeout on a busy server, say)
            reason = str(exc.orig).splitlines()[0] if exc.orig else type(exc).__name__
            log.warning("%s cut mid-answer: %s", scope["path"], reason)
        finally:
            # out of the cancelled scope now: a close cut short inside the stream is redone
            await self.stream.aclose()
            await self.on_close()


async def list_datasources(request: Request) -> JSONResponse:
    """The catalogue: every vector layer the caller may read, with its TileJSON's URL.

    Anonymous callers see the public layers (``MAPSVC_PUBLIC_LAYERS``), others those their
    role and layer grants allow, as raster listings do.
    """
    svc = services(request)
    layers = await svc.vector.layers(svc.db, refresh=flag(request, "nocache"))
    visible = visible_layers(request, sorted(layers))
    base = absolute_url(request, f"{api_prefix(request)}/gis-datasource/")
    return JSONResponse(
        {
            "layers": [
                {
                    "id": layer.id,
                    "geometry_type": layer.geometry_type,
                    "count": layer.count,
                    "bounds": layer.bounds,
                    "minzoom": layer.minzoom,
                    "maxzoom": layer.maxzoom,
                    "tilejson": base + quote(layer.id, safe=""),
                }
                for layer in (layers[name] for name in visible)
            ]
        }
    )


async def get_datasource(request: Request) -> JSONResponse:
    """The layer as TileJSON 3.0.0 (spec 2.5), its ``tiles`` the vector tile endpoint.

    TileJSON wants absolute tile URLs: under ``MAPSVC_PUBLIC_URL``, else the request's checked
    host; this answer is never cached.
    """
    layer = await _layer(request, refresh=flag(request, "nocache"))
    tiles = absolute_url(request, f"{api_prefix(request)}/vtile/{layer.id}/{{z}}/{{x}}/{{y}}.pbf")
    return JSONResponse(tilejson(layer, tiles))


async def get_vtile(request: Request) -> Response:
    """A Mapbox Vector Tile of the layer; 204 when no feature falls in it."""
    svc = services(request)
    settings = svc.settings
    p = request.path_params
    tile = parse_tile(p["z"], p["x"], p["y"])
    layer = await _layer(request)
    query = _layer_query(request, layer)
    cache = svc.vector_cache
    use_cache, key, data = not flag(request, "nocache"), "", None
    if use_cache:
        version = await cache.version(svc.db, layer)
        key = cache.key(
            "mvt", layer, version, {"tile": [tile.z, tile.x, tile.y], "q": query.params()}
        )
        data = await cache.get(key)
    status = "HIT" if data is not None else "MISS"
    if data is None:
        data = await vector_tile(
            svc.db,
            layer,
            query,
            tile,
            max_features=settings.vector.vtile_max_features,
            timeout_ms=settings.vector.vector_statement_timeout_ms,
        )
        if use_cache:
            await cache.put(key, data)
    headers = {
        "X-Cache": status,
        "Cache-Control": f"public, max-age={settings.vector.vtile_cache_ttl_s}",
        "Vary": "Accept-Encoding",
    }
    if not data:
        return Response(status_code=204, headers=headers)
    if "gzip" in request.headers.get("accept-encoding", ""):
        return Response(
            gzip.compress(data, GZIP_LEVEL),
            media_type=MVT,
            headers={**headers, "Content-Encoding": "gzip"},
        )
    return Response(data, media_type=MVT, headers=headers)


async def delete_vtile_cache(request: Request) -> JSONResponse:
    """Drop every cached tile and GeoJSON answer of a layer (an admin call)."""
    layer = await _layer(request, refresh=True)
    cache = services(request).vector_cache
    return JSONResponse({"layer": layer.id, "epoch": await cache.drop(layer)})


ROUTES = [
    Route("/geojson/{layer}", get_geojson, methods=["GET"], name="get_geojson"),
    Route("/gis-datasource", list_datasources, methods=["GET"], name="list_datasources"),
    Route("/gis-datasource/{layer}", get_datasource, methods=["GET"], name="get_datasource"),
    Route("/vtile/{layer}/{z}/{x}/{y}.pbf", get_vtile, methods=["GET"], name="get_vtile"),
    Route(
        "/vtile/{layer}/cache", delete_vtile_cache, methods=["DELETE"], name="delete_vtile_cache"
    ),
]
