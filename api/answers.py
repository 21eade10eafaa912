"""The answers several routes give (each route module imports none of the others): raster
tiles from the cache (:func:`tile_image`), BBOX renders (:func:`render_box`), images with their
``ETag`` (:func:`image_response`), GeoJSON answers (:func:`geojson_response`) and vector tiles
(:func:`vector_tile_answer`)."""

from __future__ import annotations

import asyncio
import gzip
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from sqlalchemy.exc import DBAPIError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from api.documents import not_modified
from api.services import services
from shared.base.encoder import Background
from shared.base.encoding import Encoding
from shared.base.formats import TileFormat, TileVariant
from shared.base.grid import RenderArea, TileAddress
from shared.errors import InvalidInputError
from shared.raster.rendering import Rendering
from shared.tiles.store import etag_of
from shared.vector.cache import TILE_KIND
from shared.vector.catalog import VectorLayer
from shared.vector.geojson import GeoJsonStream
from shared.vector.query import LayerQuery
from shared.vector.tiles import vector_tile

__all__ = [
    "MVT",
    "geojson_response",
    "image_response",
    "render_box",
    "tile_image",
    "vector_tile_answer",
]


def image_response(
    request: Request,
    data: bytes,
    tile_format: TileFormat,
    cache: str,
    max_age: int,
    etag: str,
) -> Response:
    """An image with its ``ETag``, age and ``X-Cache``; ``304`` when ``If-None-Match`` names it."""
    headers = {"ETag": etag, "Cache-Control": f"public, max-age={max_age}", "X-Cache": cache}
    if not_modified(request, etag):
        return Response(status_code=304, headers=headers)
    return Response(data, media_type=tile_format.media_type, headers=headers)


async def render_box(
    request: Request,
    style: str,
    lang: str,
    area: RenderArea,
    variant: TileVariant,
    names: tuple[str, str] = ("width", "height"),
    rendering: Rendering | None = None,
    background: Background | None = None,
) -> bytes:
    """A render of ``area`` (its size at scale 1: twice each side for ``@2x``) in ``variant``,
    within ``MAPSVC_TILE_MAX_SIZE`` a side and ``MAPSVC_RENDER_MAX_PIXELS``; ``names``: the
    parameters of its width and height, which a refusal names; drawn with ``rendering`` and
    over ``background`` when given."""
    svc = services(request)
    tiles = svc.settings.tiles
    side_max = tiles.max_size // variant.scale
    for name, side in zip(names, (area.width, area.height), strict=True):
        if side > side_max:
            raise InvalidInputError(
                f"{name} must be 1..{side_max} for {variant.name}", parameter=name
            )
    width, height = area.width * variant.scale, area.height * variant.scale
    if width * height > tiles.render_max_pixels:
        raise InvalidInputError(
            f"{names[0]} x {names[1]} must be at most {tiles.render_max_pixels} pixels",
            parameter=names[0],
            pixels=width * height,
        )
    svc.tiles.style(style)  # 404 for an unknown style
    scaled = RenderArea(area.bbox, width, height, area.srs, variant.scale)
    codec = Encoding.from_settings(tiles).codec(variant.format)
    drawn = rendering if rendering is not None and not rendering.empty else None
    return (await svc.tiles.pool.render(style, lang, scaled, codec, drawn, background)).data


async def tile_image(
    request: Request,
    style: str,
    lang: str,
    tile: TileAddress,
    variant: TileVariant,
    *,
    is_s3: bool = False,
    refresh: bool = False,
    rendering: Rendering | None = None,
) -> Response:
    """The answer of every raster tile route: the tile from the cache (rendered and stored on a
    miss), its ``ETag`` the stored file's, ``X-Cache``, ``X-Tile-Empty`` for an empty tile;
    drawn with ``rendering`` (cached apart) when given."""
    svc = services(request)
    tiles = svc.settings.tiles
    result = await svc.tiles.tile(
        style,
        lang,
        tile,
        svc.tile_stores.pick(is_s3),
        refresh=refresh,
        variant=variant,
        encoding=Encoding.from_settings(tiles),
        rendering=rendering,
    )
    response = image_response(
        request, result.data, variant.format, result.cache, tiles.max_age_s, result.etag
    )
    if result.empty:
        response.headers["X-Tile-Empty"] = "1"
    return response


log = logging.getLogger("mapsvc.api")
#: tiles are gzipped as they are sent: level 1 makes them 3x faster than 5 for 6% more bytes
#: (measured on tiles of 50-850 kB of points), and that CPU is PostgreSQL's on a busy host
GZIP_LEVEL = 1


MVT = "application/vnd.mapbox-vector-tile"


async def geojson_response(
    answer: bytes | GeoJsonStream, max_s: float, headers: dict[str, str] | None = None
) -> Response:
    """The response of a GeoJSON answer (``X-Cache`` and ``headers`` added): cached bytes, a
    page read whole, or a stream cut after ``max_s``."""
    media, headers = "application/geo+json", headers or {}
    if isinstance(answer, bytes):
        return Response(answer, media_type=media, headers={**headers, "X-Cache": "HIT"})
    headers = {**headers, "X-Cache": "MISS"}
    if answer.in_memory:  # read whole: one body with its length, no stream to cap
        try:
            body = b"".join([chunk async for chunk in answer.body])
        finally:
            await answer.close()
        return Response(body, media_type=media, headers=headers)
    return _CappedStream(
        answer.body, max_s=max_s, on_close=answer.close, media_type=media, headers=headers
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


async def vector_tile_answer(
    request: Request, layer: VectorLayer, features: LayerQuery, tile: TileAddress, *, refresh: bool
) -> Response:
    """The answer of every vector tile route: the tile of ``features`` from the cache (made in
    PostGIS and kept on a miss, unless ``refresh``), ``204`` when empty, gzipped when the
    client accepts it. Its ``ETag`` is its bytes' (the gzipped answer's its own): it changes
    only when they do, and ``If-None-Match`` naming it is ``304``; a watched layer's tiles are
    ``no-cache`` (a client asks again each time, and gets ``304`` while they are the same)."""
    svc = services(request)
    settings = svc.settings
    cache = svc.vector_cache
    use_cache, key, data = not refresh, "", None
    watched = await cache.watched(svc.db, layer)
    if use_cache:
        version = await cache.version(svc.db, layer)
        key = cache.key(
            TILE_KIND,
            layer,
            version,
            {"tile": [tile.z, tile.x, tile.y], "q": features.params()},
            tile,
        )
        data = await cache.get(key)
    status = "HIT" if data is not None else "MISS"
    if data is None:
        data = await vector_tile(
            svc.db,
            layer,
            features,
            tile,
            max_features=settings.vector.vtile_max_features,
            timeout_ms=settings.vector.statement_timeout_ms,
            filter_timeout_ms=settings.vector.filter_timeout_ms,
            simplify_px=layer.simplify_px(settings.vector.vtile_simplify_px),
        )
        if use_cache:
            await cache.put(key, data)
    headers = {
        "X-Cache": status,
        # a watched layer's tile may change at any time: asked again each time, it is 304
        # while its bytes are the same
        "Cache-Control": (
            "public, no-cache"
            if watched
            else f"public, max-age={settings.vector.vtile_cache_ttl_s}"
        ),
        "Vary": "Accept-Encoding",
    }
    if not data:
        return Response(status_code=204, headers=headers)
    zipped = "gzip" in request.headers.get("accept-encoding", "")
    etag = etag_of(data)
    headers["ETag"] = f'{etag[:-1]}-gz"' if zipped else etag
    if not_modified(request, headers["ETag"]):
        return Response(status_code=304, headers=headers)
    if zipped:
        return Response(
            gzip.compress(data, GZIP_LEVEL),
            media_type=MVT,
            headers={**headers, "Content-Encoding": "gzip"},
        )
    return Response(data, media_type=MVT, headers=headers)
