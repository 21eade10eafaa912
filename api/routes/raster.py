"""Raster endpoints: listing, configuration, statistics, metadata, compression (spec 4.3–4.6)."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from api.access import Rule, Sight
from api.endpoint import Endpoint, Handler
from api.fields import Flag, JobQuery, Query, RasterId, Text, raster_id
from api.job_reply import JobStart
from api.links import api_prefix
from api.openapi.answers import json_body
from api.openapi.models import CompressResult, RasterConfig, RasterInfo, RasterListing, RasterStat
from api.rendering import RenderQuery, Resampling
from api.services import services
from shared import job_messages as messages
from shared.queues import RASTER_COMPRESS, RASTER_CONFIG, JobKind
from shared.raster.layer import locate_layer
from shared.raster.paths import MAX_PATH_BYTES, decode_id
from shared.raster.queries import ResultCache, raster_info_of, raster_listing, raster_stat_of

__all__ = ["ENDPOINTS"]

_NOCACHE = "1: bypass the cache and compute afresh"


class ListingQuery(Query):
    """The folder to list."""

    folder: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_PATH_BYTES,
        description="Folder relative to the raster root: map/raster, or the prefix of the raster"
        " bucket (MAPSVC_RASTER_STORE=s3); default: the root",
    )
    nocache: Flag = Field(False, description=_NOCACHE)


class ConfigQuery(JobQuery, RenderQuery):
    """The raster to configure as a layer, and how it is drawn (TiTiler's rendering
    parameters: they become the layer's own rendering)."""

    path: str = Text(
        MAX_PATH_BYTES,
        description="File or folder relative to the raster root (map/raster, or the raster"
        " bucket's prefix)",
        examples=["single/RGB.byte.tif"],
    )
    resampling: Resampling | None = Field(
        None,
        description="How the layer's pixels are interpolated when drawn, and how its previews"
        " and overviews are reduced: `nearest` keeps the source's own values (classes, indices,"
        " sharp pixels), `bilinear` and `cubic` blend them (imagery); a configuration made with"
        " another one is rebuilt. Absent: as configured last, else `nearest` for a raster with"
        " a colour table and `bilinear` for any other",
    )
    nocache: Flag = Field(False, description=_NOCACHE)


class RasterQuery(Query):
    """A raster (layer) by id."""

    id: RasterId = raster_id()
    nocache: Flag = Field(False, description=_NOCACHE)


class InfoQuery(Query):
    """A layer's raster, or one file of it."""

    id: RasterId = raster_id()
    file: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_PATH_BYTES,
        description="A file of the layer, relative to the raster root",
    )
    nocache: Flag = Field(False, description=_NOCACHE)


class CompressQuery(JobQuery):
    """The layer to compress."""

    id: RasterId = raster_id()


def _cache(request: Request, refresh: bool) -> ResultCache:
    """The cache of listings and statistics; ``refresh``: compute afresh."""
    svc = services(request)
    settings = svc.settings
    return ResultCache(svc.redis, settings.cache_ttl_s, settings.result_cache_max_bytes, refresh)


async def get_raster_list(request: Request, query: ListingQuery) -> JSONResponse:
    """The rasters of a folder (spec 2.1).

    Those the caller may see; anonymous callers: the public layers, and the folders that lead
    to them.
    """
    svc = services(request)
    listing = await run_in_threadpool(
        raster_listing,
        _cache(request, query.nocache),
        svc.settings.work_dir,
        query.folder or "",
        rasters=svc.rasters,
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


async def get_raster_config(request: Request, query: ConfigQuery) -> JobStart:
    """Configure the raster at a path as a layer (spec 4.4, 2.2).

    A job; drawn with ``resampling`` (absent: as it was configured last, else bilinear; nearest
    for a raster with a colour table), and with the rendering parameters given (absent: as it
    was configured last, else the raster's default drawing).
    """
    svc = services(request)
    settings = svc.settings
    rendering = query.rendering()
    where = await run_in_threadpool(
        locate_layer, settings.work_dir, query.path, rasters=svc.rasters
    )
    message = messages.RasterConfig(
        where.rel_path,
        settings.default_lang,
        api_prefix(request),
        query.nocache,
        query.resampling,
        None if rendering.empty else rendering.to_json(),
    )
    return JobStart(message, dedup=True)


async def get_raster_stat(request: Request, query: RasterQuery) -> JSONResponse:
    """Statistics of a raster (spec 2.3)."""
    svc = services(request)
    stat = await run_in_threadpool(
        raster_stat_of,
        _cache(request, query.nocache),
        svc.settings.work_dir,
        query.id,
        rasters=svc.rasters,
    )
    return JSONResponse(stat)


async def get_raster_info(request: Request, query: InfoQuery) -> JSONResponse:
    """Metadata of a layer's raster as gdalinfo -json prints it (spec 2.4)."""
    svc = services(request)
    info = await run_in_threadpool(
        raster_info_of,
        _cache(request, query.nocache),
        svc.settings.work_dir,
        query.id,
        query.file,
        rasters=svc.rasters,
    )
    return JSONResponse(info)


async def get_layer_compress(request: Request, query: CompressQuery) -> JobStart:
    """Compress a layer's rasters into commpress (spec 4.3)."""
    svc = services(request)
    rel = decode_id(query.id)
    where = await run_in_threadpool(locate_layer, svc.settings.work_dir, rel, rasters=svc.rasters)
    return JobStart(messages.RasterCompress(where.rel_path), dedup=True)


#: an endpoint of the rasters: a GET of their group
_endpoint = functools.partial(Endpoint, "GET", tag="rasters")


def _read(
    path: str,
    handler: Handler,
    layers: tuple[str, ...],
    query: type[Query],
    model: type[BaseModel],
    said: str,
) -> Endpoint:
    """A reader's look at one layer, which the parameters ``layers`` name: the data budget.

    It answers ``model`` (``said`` describes it); ``404``: no such layer or file, ``422``: it
    cannot be read.
    """
    rule, answer = Rule("reader", layers=layers), {"200": json_body(model, said)}
    return _endpoint(
        path, handler, rule=rule, budget="data", query=query, answer=answer, errors=(404, 422)
    )


def _job(
    path: str,
    handler: Handler,
    layer: str,
    query: type[Query],
    model: type[BaseModel],
    said: str,
    job: JobKind[Any],
) -> Endpoint:
    """An operator's ``job`` about the layer the parameter ``layer`` names: the jobs budget.

    Its result is ``model`` (``said`` describes it).
    """
    rule, answer = Rule("operator", layers=(layer,)), {"200": json_body(model, said)}
    return _endpoint(path, handler, rule=rule, budget="jobs", query=query, answer=answer, job=job)


ENDPOINTS = [
    _endpoint(
        "/gis-raster",
        get_raster_list,
        rule=Rule(None, layers=("folder",), public=True),  # anonymous: the public layers
        budget="data",
        query=ListingQuery,
        answer={"200": json_body(RasterListing, "The listing")},
        errors=(404,),
    ),
    _job(
        "/gis-raster/{path:path}",
        get_raster_config,
        "path",
        ConfigQuery,
        RasterConfig,
        "The layer",
        RASTER_CONFIG,
    ),
    _read(
        "/gis-raster-stat/{id}", get_raster_stat, ("id",), RasterQuery, RasterStat, "The statistics"
    ),
    _read(
        "/gis-raster-info/{id}",
        get_raster_info,
        ("id", "file"),
        InfoQuery,
        RasterInfo,
        "The metadata",
    ),
    _job(
        "/gis-layer-compress/{id}",
        get_layer_compress,
        "id",
        CompressQuery,
        CompressResult,
        "The compressed files",
        RASTER_COMPRESS,
    ),
]
