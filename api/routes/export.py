"""Export (issue 25): a layer's tiles as one MBTiles or PMTiles file, and its download."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import uuid
from typing import Literal

from pydantic import Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, Response

from api.access import Rule
from api.endpoint import Endpoint, Job
from api.fields import Box, JobQuery, Lang, Query, Text
from api.links import link, route_path
from api.openapi.answers import json_body
from api.openapi.models import ExportResult
from api.services import services
from shared.errors import InvalidInputError, NotFoundError
from shared.params import parse_bbox
from shared.raster.paths import RASTER_LAYER_EXAMPLE
from shared.tiles.export import (
    ExportJob,
    export_file,
    export_name,
    plan_export,
    tile_format_of,
)
from shared.tiles.grid import MAX_ZOOM

__all__ = ["ENDPOINTS"]

_LAYER_ID = "Layer id: a raster layer's, or a vector layer's (`schema.table` or an alias)"
_MEDIA_TYPES = {"mbtiles": "application/vnd.sqlite3", "pmtiles": "application/vnd.pmtiles"}


class ExportQuery(JobQuery):
    """What to export: a layer, the archive, the tiles' format, a box and zooms."""

    id: str = Text(200, description=_LAYER_ID, examples=[RASTER_LAYER_EXAMPLE])
    format: Literal["mbtiles", "pmtiles"] = Field(
        "mbtiles", description="The file: `mbtiles` (MBTiles 1.3) or `pmtiles` (PMTiles v3)"
    )
    minzoom: int = Field(0, ge=0, le=MAX_ZOOM, description="First zoom")
    maxzoom: int | None = Field(
        None,
        ge=1,
        le=MAX_ZOOM + 1,
        description="End zoom, excluded (default: one past the layer's own maxzoom)",
    )
    tile_format: Literal["png", "webp", "jpg", "jpeg", "mvt"] | None = Field(
        None,
        description="The tiles: `png` (raster layers' default), `webp`, `jpg` (`jpeg`); `mvt`"
        " (vector layers, their only format, gzipped)",
    )
    bbox: Box | None = Field(
        None, description="minlon,minlat,maxlon,maxlat (EPSG:4326); default: the layer's bounds"
    )
    lang: Lang = Field("", description="Label language of raster tiles (a configured tag)")


class ExportFileQuery(Query):
    """An export of a layer."""

    id: str = Text(200, description=_LAYER_ID, examples=[RASTER_LAYER_EXAMPLE])
    name: str = Text(60, description="The file's name, as the export job's result gives it")


async def _layer(request: Request, layer_id: str) -> tuple[list[float], int, bool]:
    """A layer's bounds, own maxzoom, and whether it is a vector layer.

    Raises:
        NotFoundError: neither a raster layer nor a vector layer has the id.
    """
    svc = services(request)
    with contextlib.suppress(InvalidInputError, NotFoundError):  # not a raster layer's id
        info = svc.tiles.style(layer_id)
        return info.footprint, info.maxzoom, False
    try:
        layer = await svc.vector.layer(svc.db, layer_id)
    except NotFoundError:
        raise NotFoundError(
            f"no layer {layer_id[:200]!r}: neither a raster layer nor a vector layer",
            parameter="id",
        ) from None
    return layer.bounds, layer.maxzoom, True


async def get_layer_export(request: Request, query: ExportQuery) -> Response:
    """Export a layer's tiles for a box and zooms as an MBTiles or PMTiles file.

    Raster tiles are those ``rtile`` answers (from the tile cache, the missing ones rendered
    and cached), vector tiles those of ``/vtile``. The result names the file and its download
    URL. An export above ``MAPSVC_PRETILE_MAX_TILES`` tiles is ``422`` with the plan.
    """
    svc = services(request)
    bounds, own_maxzoom, vector = await _layer(request, query.id)
    tile_format = tile_format_of(query.tile_format, vector)
    job_id = str(uuid.uuid4())
    name = export_name(job_id, query.format)
    # the download route's path is this route's and the file's (its parameter ``name`` is
    # route_path's own)
    path = f"{route_path(request, 'get_layer_export', id=query.id)}/files/{name}"
    job = ExportJob(
        query.id,
        vector,
        query.format,
        tile_format,
        list(parse_bbox(query.bbox)) if query.bbox else None,
        query.minzoom,
        query.maxzoom,
        "" if vector else query.lang,
        link(request, path),
    ).within(bounds, own_maxzoom)
    bbox, maxzoom = job.area
    cap = svc.settings.tiles.pretile_max_tiles
    await run_in_threadpool(plan_export, bbox, job.minzoom, maxzoom, cap)  # 422 now
    params = dataclasses.asdict(job)
    return await svc.jobs.reply(request, params, run_async=query.run_async, job_id=job_id)


async def get_layer_export_file(request: Request, query: ExportFileQuery) -> Response:
    """Download an export of a layer (HTTP range requests: PMTiles readers ask for parts)."""
    path = export_file(services(request).settings.dirs.exports, query.id, query.name)
    media_type = _MEDIA_TYPES[path.suffix[1:]]
    return FileResponse(path, media_type=media_type, filename=path.name)


_endpoint = functools.partial(Endpoint, "GET", tag="tiles")

ENDPOINTS = [
    _endpoint(
        "/gis-layer-export/{id}",
        get_layer_export,
        rule=Rule("operator", layers=("id",)),
        budget="jobs",
        query=ExportQuery,
        answer={"200": json_body(ExportResult, "The export: its file and download URL")},
        errors=(404, 422),
        job=Job("export", "tiles.export"),
    ),
    _endpoint(
        "/gis-layer-export/{id}/files/{name}",
        get_layer_export_file,
        rule=Rule("reader", layers=("id",), public=True),  # who may read the layer's tiles
        budget="tiles",  # a PMTiles reader asks for parts as it draws tiles
        query=ExportFileQuery,
        answer={
            "200": {
                "description": "The file",
                "content": {
                    t: {"schema": {"type": "string", "format": "binary"}}
                    for t in _MEDIA_TYPES.values()
                },
            },
            "206": {"description": "The part of the file a `Range` header asked"},
        },
        errors=(404,),
    ),
]
