"""Tiles: ``rtile`` (spec 4.1; BBOX renders, debug), pre-tiling (4.2), the speed test (4.7)."""

from __future__ import annotations

import shlex

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from api.jobs import JobService
from api.params import flag, int_param
from shared.errors import InvalidInputError, UnavailableError
from shared.settings import Settings
from shared.tiles.grid import MAX_ZOOM, parse_tile
from shared.tiles.pretile import DEFAULT_MAXZOOM, DEFAULT_MINZOOM, check_zooms, plan_pretile
from shared.tiles.service import TileService, etag_of
from shared.tiles.store import TileStore
from shared.tiles.styles import check_lang

__all__ = ["ROUTES"]


def _service(request: Request) -> TileService:
    service: TileService = request.app.state.tiles
    return service


def _store(request: Request) -> TileStore:
    if flag(request, "isS3"):
        store: TileStore | None = request.app.state.s3_tiles
        if store is None:
            raise UnavailableError("object storage is not configured (MAPSVC_S3_* settings)")
        return store
    file_store: TileStore = request.app.state.file_tiles
    return file_store


def _bbox(request: Request) -> tuple[float, float, float, float] | None:
    raw = request.query_params.get("BBOX") or request.query_params.get("bbox")
    if raw is None:
        return None
    try:
        values = [float(v) for v in raw.split(",")]
    except ValueError:
        values = []
    if len(values) != 4 or not (values[0] < values[2] and values[1] < values[3]):
        raise InvalidInputError("BBOX must be minx,miny,maxx,maxy with min < max", value=raw[:200])
    return values[0], values[1], values[2], values[3]


def _png(request: Request, png: bytes, cache: str, max_age: int) -> Response:
    etag = etag_of(png)
    headers = {"ETag": etag, "Cache-Control": f"public, max-age={max_age}", "X-Cache": cache}
    if etag in {t.strip() for t in request.headers.get("if-none-match", "").split(",")}:
        return Response(status_code=304, headers=headers)
    return Response(png, media_type="image/png", headers=headers)


async def get_tile(request: Request) -> Response:
    """A tile of a style (or a BBOX render); ``debug=1`` answers the tile's debug object."""
    settings: Settings = request.app.state.settings
    params = request.path_params
    style = params["style"]
    lang = check_lang(
        params.get("lang") or request.query_params.get("lang") or settings.default_lang
    )
    tile = parse_tile(params["z"], params["x"], params["y"])
    service = _service(request)
    bbox = _bbox(request)
    if bbox is not None:
        width = int_param(request, "width", 256, 1, settings.tile_max_size)
        height = int_param(request, "height", 256, 1, settings.tile_max_size)
        srs = request.query_params.get("srs") or request.query_params.get("crs") or "EPSG:3857"
        service.style(style)  # 404 for an unknown style
        rendered = await service.pool.render(style, lang, bbox, width, height, srs.lower())
        return _png(request, rendered.png, "MISS", settings.tile_max_age_s)
    if flag(request, "debug"):
        out = f"{style}-{tile.z}-{tile.x}-{tile.y}.png"
        argv = ["mapsvc", "render-tile", style, str(tile.z), str(tile.x), str(tile.y)]
        argv += ["--lang", lang, "--out", out]
        return JSONResponse({"bbound": service.bbound(style, tile), "cmd": shlex.join(argv)})
    result = await service.tile(
        style, lang, tile, _store(request), refresh=flag(request, "nocache")
    )
    response = _png(request, result.png, result.cache, settings.tile_max_age_s)
    if result.empty:
        response.headers["X-Tile-Empty"] = "1"
    return response


async def get_layer_pretile(request: Request) -> Response:
    """Pre-tile a layer (spec 4.2): a job; ``dryrun=1`` answers the plan without rendering."""
    settings: Settings = request.app.state.settings
    style = request.path_params["id"]
    info = _service(request).style(style)
    minzoom = int_param(request, "minzoom", DEFAULT_MINZOOM, 0, MAX_ZOOM)
    maxzoom = int_param(request, "maxzoom", DEFAULT_MAXZOOM, 1, MAX_ZOOM + 1)
    check_zooms(minzoom, maxzoom)
    if flag(request, "dryrun"):
        bounds = info.bounds or [-180.0, -85.0, 180.0, 85.0]
        return JSONResponse(plan_pretile(bounds, minzoom, maxzoom))
    lang = check_lang(request.query_params.get("lang") or settings.default_lang)
    params = {
        "style": style,
        "lang": lang,
        "minzoom": minzoom,
        "maxzoom": maxzoom,
        "refresh": flag(request, "nocache"),
        "s3": flag(request, "isS3"),
    }
    jobs: JobService = request.app.state.jobs
    return await jobs.reply(request, "pretile", "tiles.pretile", params, dedup=True)


async def get_speed_test(request: Request) -> Response:
    """The tiling speed test of a layer (spec 4.7): a job reporting on its event stream."""
    settings: Settings = request.app.state.settings
    style = request.query_params.get("layer")
    if not style:
        raise InvalidInputError("layer is required (a layer id)", parameter="layer")
    _service(request).style(style)  # 404 for an unknown layer
    lang = check_lang(request.query_params.get("lang") or settings.default_lang)
    jobs: JobService = request.app.state.jobs
    return await jobs.reply(
        request, "speed-test", "tiles.speed_test", {"style": style, "lang": lang}
    )


ROUTES = [
    Route("/rtile/{style}/{lang}/{z}/{x}/{y}.png", get_tile, methods=["GET"], name="get_tile"),
    Route("/rtile/{style}/{z}/{x}/{y}.png", get_tile, methods=["GET"], name="get_tile_nolang"),
    Route("/gis-layer-pretile/{id}", get_layer_pretile, methods=["GET"], name="get_layer_pretile"),
    Route("/gis-speed-test", get_speed_test, methods=["GET"], name="get_speed_test"),
]
