"""Tiles: ``rtile`` (spec 4.1; BBOX renders, debug), pre-tiling (4.2), the speed test (4.7)."""

from __future__ import annotations

import shlex
import uuid

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from api.access import principal_of
from api.links import job_links
from api.params import bbox_param, flag, int_param, lang_param, srs_param
from api.services import services
from shared.errors import ConflictError, InvalidInputError
from shared.params import Bbox
from shared.tiles.encoding import Encoding
from shared.tiles.formats import TileFormat, TileVariant, parse_variant
from shared.tiles.grid import MAX_ZOOM, RenderArea, parse_tile
from shared.tiles.pretile import (
    DEFAULT_MAXZOOM,
    DEFAULT_MINZOOM,
    PretileLock,
    check_ceiling,
    plan_pretile,
)
from shared.tiles.store import etag_of

__all__ = ["ROUTES"]


def _image(
    request: Request,
    data: bytes,
    tile_format: TileFormat,
    cache: str,
    max_age: int,
    etag: str,
) -> Response:
    headers = {"ETag": etag, "Cache-Control": f"public, max-age={max_age}", "X-Cache": cache}
    if etag in {t.strip() for t in request.headers.get("if-none-match", "").split(",")}:
        return Response(status_code=304, headers=headers)
    return Response(data, media_type=tile_format.media_type, headers=headers)


async def _bbox_render(
    request: Request, style: str, lang: str, variant: TileVariant, bbox: Bbox, srs: str
) -> Response:
    """A render of ``bbox``, ``width`` x ``height`` pixels (twice each for ``@2x``)."""
    svc = services(request)
    tiles = svc.settings.tiles
    side_max = tiles.tile_max_size // variant.scale
    width = int_param(request, "width", 256, 1, side_max) * variant.scale
    height = int_param(request, "height", 256, 1, side_max) * variant.scale
    if width * height > tiles.render_max_pixels:
        raise InvalidInputError(
            f"width x height must be at most {tiles.render_max_pixels} pixels",
            parameter="width",
            pixels=width * height,
        )
    svc.tiles.style(style)  # 404 for an unknown style
    area = RenderArea(bbox, width, height, srs.lower(), variant.scale)
    codec = Encoding.from_settings(tiles).codec(variant.format)
    rendered = await svc.tiles.pool.render(style, lang, area, codec)
    data, max_age = rendered.data, tiles.tile_max_age_s
    return _image(request, data, variant.format, "MISS", max_age, etag_of(data))


async def get_tile(request: Request) -> Response:
    """A tile of a style, ``<y>[@2x].<format>``, or a BBOX render; ``debug=1``: its debug object."""
    svc = services(request)
    settings = svc.settings
    params = request.path_params
    style = params["style"]
    lang = lang_param(request, params.get("lang"))
    row, variant = parse_variant(params["y"], params.get("format", TileFormat.PNG))
    tile = parse_tile(params["z"], params["x"], row)
    service = svc.tiles
    srs = srs_param(request)
    bbox = bbox_param(request, ("BBOX", "bbox"), srs)
    if bbox is not None:
        return await _bbox_render(request, style, lang, variant, bbox, srs)
    if flag(request, "debug"):
        out = f"{style}-{tile.z}-{tile.x}-{tile.y}.png"
        argv = ["mapsvc", "render-tile", style, str(tile.z), str(tile.x), str(tile.y)]
        argv += ["--lang", lang, "--out", out]
        return JSONResponse({"bbound": service.bbound(style, tile), "cmd": shlex.join(argv)})
    result = await service.tile(
        style,
        lang,
        tile,
        svc.tile_stores.pick(flag(request, "isS3")),
        refresh=flag(request, "nocache"),
        variant=variant,
        encoding=Encoding.from_settings(settings.tiles),
    )
    max_age = settings.tiles.tile_max_age_s
    response = _image(request, result.data, variant.format, result.cache, max_age, result.etag)
    if result.empty:
        response.headers["X-Tile-Empty"] = "1"
    return response


async def get_tile_access(request: Request) -> Response:
    """``204`` naming the caller (``X-Principal``: its principal's id) when it may read the
    style's tiles, else the answer a tile would get.

    The nginx front asks it (``auth_request``, with exactly the client's ``Authorization``
    header and query) before it sends a cached tile to a caller with credentials, keeps a yes a
    few seconds per style and credential as sent, and counts the tiles budget per principal.
    """
    services(request).tiles.style(request.path_params["style"])  # 404 for an unknown style
    return Response(status_code=204, headers={"X-Principal": principal_of(request).id})


async def get_layer_pretile(request: Request) -> Response:
    """Pre-tile a layer (spec 4.2): a job; ``dryrun=1`` answers the plan without rendering.

    ``format`` names the tiles made: ``png`` (the default), ``webp``, ``jpg``, each with ``@2x``.

    A plan above ``MAPSVC_PRETILE_MAX_TILES`` is ``422`` with the plan; while a run of the
    layer goes on, any other run of it (whatever its language or zooms) is ``409`` naming it.
    """
    svc = services(request)
    settings = svc.settings
    style = request.path_params["id"]
    info = svc.tiles.style(style)
    minzoom = int_param(request, "minzoom", DEFAULT_MINZOOM, 0, MAX_ZOOM)
    maxzoom = int_param(request, "maxzoom", DEFAULT_MAXZOOM, 1, MAX_ZOOM + 1)
    variant = TileVariant.from_name(request.query_params.get("format") or TileFormat.PNG)
    plan = plan_pretile(info.footprint, minzoom, maxzoom, ceiling=settings.tiles.pretile_max_tiles)
    if flag(request, "dryrun"):
        return JSONResponse(plan)
    check_ceiling(plan)
    params = {
        "style": style,
        "lang": lang_param(request),
        "minzoom": minzoom,
        "maxzoom": maxzoom,
        "refresh": flag(request, "nocache"),
        "s3": flag(request, "isS3"),
        "variant": variant.name,
    }
    jobs = svc.jobs
    job_id = str(uuid.uuid4())
    lock = PretileLock(jobs.store, style, settings.jobs.job_time_limit_s)
    running = await run_in_threadpool(lock.acquire, job_id)
    if running is not None:
        raise ConflictError(
            f"layer {style} is being pre-tiled by job {running}: wait for it to end or cancel it",
            job_id=running,
            links=job_links(request, running),
        )
    try:
        return await jobs.reply(request, "pretile", "tiles.pretile", params, job_id=job_id)
    except Exception:
        # never enqueued (no broker, no connection to wait with), or ended in failure: free
        await run_in_threadpool(lock.release, job_id)
        raise


async def get_speed_test(request: Request) -> Response:
    """The tiling speed test of a layer (spec 4.7): a job reporting on its event stream."""
    svc = services(request)
    style = request.query_params.get("layer")
    if not style:
        raise InvalidInputError("layer is required (a layer id)", parameter="layer")
    svc.tiles.style(style)  # 404 for an unknown layer
    lang = lang_param(request)
    jobs = svc.jobs
    return await jobs.reply(
        request, "speed-test", "tiles.speed_test", {"style": style, "lang": lang}
    )


ROUTES = [
    # `{y}` is the row, or the row and `@2x`; the `.png` forms first, then any other format
    Route("/rtile/{style}/{lang}/{z}/{x}/{y}.png", get_tile, methods=["GET"], name="get_tile"),
    Route("/rtile/{style}/{z}/{x}/{y}.png", get_tile, methods=["GET"], name="get_tile_nolang"),
    Route(
        "/rtile/{style}/{lang}/{z}/{x}/{y}.{format}",
        get_tile,
        methods=["GET"],
        name="get_tile_format",
    ),
    Route(
        "/rtile/{style}/{z}/{x}/{y}.{format}",
        get_tile,
        methods=["GET"],
        name="get_tile_nolang_format",
    ),
    Route("/rtile/{style}/access", get_tile_access, methods=["GET"], name="get_tile_access"),
    Route("/gis-layer-pretile/{id}", get_layer_pretile, methods=["GET"], name="get_layer_pretile"),
    Route("/gis-speed-test", get_speed_test, methods=["GET"], name="get_speed_test"),
]
