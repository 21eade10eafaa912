"""Raster endpoints: listing, configuration, statistics, metadata, compression (spec 4.3–4.6)."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from api.access import Sight
from api.links import api_prefix
from api.params import flag
from api.services import services
from shared.raster.layer import locate_layer
from shared.raster.paths import decode_id
from shared.raster.queries import ResultCache, raster_info_of, raster_listing, raster_stat_of
from shared.raster.resampling import parse_resampling

__all__ = ["ROUTES"]


def _cache(request: Request) -> ResultCache:
    svc = services(request)
    settings = svc.settings
    refresh = flag(request, "nocache")
    return ResultCache(svc.redis, settings.cache_ttl_s, settings.result_cache_max_bytes, refresh)


async def get_raster_list(request: Request) -> JSONResponse:
    """The rasters of ``folder`` (spec 2.1) the caller may see; anonymous callers: the public
    layers, and the folders that lead to them."""
    folder = request.query_params.get("folder", "")
    svc = services(request)
    listing = await run_in_threadpool(
        raster_listing, _cache(request), svc.settings.work_dir, folder, rasters=svc.rasters
    )
    # the cached listing is everyone's; each caller is shown the layers it may see, and the
    # folders that lead to them
    sight = Sight.of(request)
    listing["rows"] = [
        row
        for row in listing["rows"]
        if sight.sees(row["id"]) or (row["type"] == "dir" and sight.leads_to(row["path"]))
    ]
    return JSONResponse(listing)


async def get_raster_config(request: Request) -> Response:
    """Configure the raster at ``path`` as a layer, drawn with ``resampling`` (absent: as it was
    configured last, else bilinear): a job (spec 4.4, 2.2)."""
    svc = services(request)
    settings = svc.settings
    asked = request.query_params.get("resampling")
    resampling = parse_resampling(asked).value if asked else None
    refresh = flag(request, "nocache")
    where = await run_in_threadpool(
        locate_layer, settings.work_dir, request.path_params["path"], rasters=svc.rasters
    )
    params = {
        "path": where.rel_path,
        "lang": settings.default_lang,
        "url_prefix": api_prefix(request),
        "refresh": refresh,
        "resampling": resampling,
    }
    jobs = svc.jobs
    return await jobs.reply(request, "raster-config", "raster.configure", params, dedup=True)


async def get_raster_stat(request: Request) -> JSONResponse:
    """Statistics of a raster file or folder (spec 2.3)."""
    svc, raster_id = services(request), request.path_params["id"]
    stat = await run_in_threadpool(
        raster_stat_of, _cache(request), svc.settings.work_dir, raster_id, rasters=svc.rasters
    )
    return JSONResponse(stat)


async def get_raster_info(request: Request) -> JSONResponse:
    """Metadata of a layer's raster as ``gdalinfo -json`` prints it (spec 2.4)."""
    svc, raster_id = services(request), request.path_params["id"]
    file = request.query_params.get("file") or None
    info = await run_in_threadpool(
        raster_info_of, _cache(request), svc.settings.work_dir, raster_id, file, rasters=svc.rasters
    )
    return JSONResponse(info)


async def get_layer_compress(request: Request) -> Response:
    """Compress a layer's rasters into ``commpress``: a job (spec 4.3)."""
    svc = services(request)
    settings = svc.settings
    rel = decode_id(request.path_params["id"])
    where = await run_in_threadpool(locate_layer, settings.work_dir, rel, rasters=svc.rasters)
    jobs = svc.jobs
    return await jobs.reply(
        request, "raster-compress", "raster.compress", {"path": where.rel_path}, dedup=True
    )


ROUTES = [
    Route("/gis-raster", get_raster_list, methods=["GET"], name="get_raster_list"),
    Route("/gis-raster/{path:path}", get_raster_config, methods=["GET"], name="get_raster_config"),
    Route("/gis-raster-stat/{id}", get_raster_stat, methods=["GET"], name="get_raster_stat"),
    Route("/gis-raster-info/{id}", get_raster_info, methods=["GET"], name="get_raster_info"),
    Route(
        "/gis-layer-compress/{id}", get_layer_compress, methods=["GET"], name="get_layer_compress"
    ),
]
