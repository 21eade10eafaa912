"""Export (issue 25): a layer's tiles as one MBTiles or PMTiles file, and its download.

An export takes the coverages pre-tiling takes (:mod:`api.coverage`), and is written to the
disk or (``isS3=1``) to the bucket; the download route serves either, a part at a time.
"""

from __future__ import annotations

import functools
import uuid
from typing import Literal

from pydantic import Field
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from api.access import Rule
from api.coverage import CoverageBody, CoverageQuery, coverage_of
from api.endpoint import Endpoint
from api.errors import error_response
from api.fields import Flag, Lang, Query, Text
from api.job_reply import JobStart
from api.layers import footprint_of
from api.links import link, route_path
from api.openapi.answers import json_body
from api.openapi.models import ExportResult
from api.services import services
from shared import job_messages as messages
from shared.base.grid import MAX_ZOOM
from shared.errors import NotFoundError
from shared.queues import EXPORT
from shared.raster.paths import RASTER_LAYER_EXAMPLE
from shared.seeding.coverage import Coverage
from shared.seeding.export import (
    check_export_name,
    export_area,
    export_file,
    export_name,
    export_within,
    no_export,
    plan_export,
    tile_format_of,
)
from shared.seeding.export_s3 import (
    MEDIA_TYPES,
    ExportBucket,
    ExportObject,
    satisfiable,
    single_range,
    well_formed,
)
from shared.seeding.pretile import LayerLock
from shared.tiles.styles import StyleInfo
from shared.vector.catalog import VectorLayer

__all__ = ["ENDPOINTS"]

_LAYER_ID = "Layer id: a raster layer's, or a vector layer's (`schema.table` or an alias)"


class ExportQuery(CoverageQuery):
    """What to export: a layer, the archive, the tiles' format, a coverage and zooms."""

    id: str = Text(200, description=_LAYER_ID, examples=[RASTER_LAYER_EXAMPLE])
    archive: Literal["mbtiles", "pmtiles"] = Field(
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
    lang: Lang = Field("", description="Label language of raster tiles (a configured tag)")
    is_s3: Flag = Field(
        False, alias="isS3", description="1: write the file to the bucket (`exports/<id>/`)"
    )


class ExportFileQuery(Query):
    """An export of a layer."""

    id: str = Text(200, description=_LAYER_ID, examples=[RASTER_LAYER_EXAMPLE])
    name: str = Text(60, description="The file's name, as the export job's result gives it")


async def post_layer_export(
    request: Request,
    query: ExportQuery,
    body: CoverageBody | None,
    layer: StyleInfo | VectorLayer,
) -> JobStart:
    """Export a layer's tiles for a coverage and zooms as an MBTiles or PMTiles file.

    Raster tiles are those ``rtile`` answers (from the tile cache, the missing ones rendered
    and cached), vector tiles those of ``/vtile``. The coverage is pre-tiling's: ``bbox`` (in
    ``bbox_crs``), the polygons of ``coverage_layer`` that ``where`` picks, or a GeoJSON polygon
    (the body); else the layer's bounds; ``buffer`` grows each tile. The result names the
    file and its download URL (and with ``isS3=1`` its bucket and key). An export above
    ``MAPSVC_PRETILE_MAX_TILES`` tiles is ``422`` with the plan.
    """
    svc = services(request)
    bounds, own_maxzoom, vector = footprint_of(layer)
    tile_format = tile_format_of(query.tile_format, vector)
    coverage = await coverage_of(request, query, body) or Coverage.box(bounds, query.buffer)
    if query.is_s3:
        svc.tile_stores.pick(True)  # 503 now when object storage is not configured
    job_id = str(uuid.uuid4())
    name = export_name(job_id, query.archive)
    # the download route's path is this route's and the file's (its parameter ``name`` is
    # route_path's own)
    path = f"{route_path(request, 'post_layer_export', id=query.id)}/files/{name}"
    job = messages.Export(
        query.id,
        vector,
        query.archive,
        tile_format,
        coverage.to_json(),
        query.minzoom,
        query.maxzoom,
        lang="" if vector else query.lang,
        url=link(request, path),
        buffer=query.buffer,
        s3=query.is_s3,
    )
    job = export_within(job, bounds, own_maxzoom)
    _, maxzoom = export_area(job)
    cap = svc.settings.tiles.pretile_max_tiles
    await run_in_threadpool(plan_export, coverage, job.minzoom, maxzoom, cap)  # 422 now
    lock = LayerLock(svc.jobs.store, query.id, svc.settings.jobs.time_limit_s, kind="export")
    return JobStart(job, job_id=job_id, lock=lock, doing="exported")


async def get_layer_export_file(request: Request, query: ExportFileQuery) -> Response:
    """Download an export of a layer, from the disk or the bucket (HTTP range requests: PMTiles
    readers ask for parts)."""
    svc = services(request)
    name = check_export_name(query.name)
    s3 = svc.tile_stores.s3
    try:
        path = export_file(svc.settings.dirs.exports, query.id, name)
    except NotFoundError:
        if s3 is None:
            raise
    else:
        size = path.stat().st_size
        if not satisfiable(single_range(request.headers.get("range")), size):
            return _not_in_file(request, size)
        return _ExportFile(path, media_type=MEDIA_TYPES[path.suffix[1:]], filename=name)
    asked = single_range(request.headers.get("range"))
    found = await run_in_threadpool(ExportBucket(s3).read, query.id, name, asked)
    if found is None:
        raise no_export(name)
    if isinstance(found, int):
        return _not_in_file(request, found)
    assert isinstance(found, ExportObject)
    return _streamed(found, name)


class _ExportFile(FileResponse):
    """An export on the disk, its ``Range`` served; a malformed one ignored (the whole file, as
    RFC 9110 has a server do, and as the bucket's exports are served)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        asked = Headers(scope=scope).get("range")
        if asked is not None and not well_formed(asked):
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k != b"range"]}
        await super().__call__(scope, receive, send)


def _not_in_file(request: Request, size: int) -> Response:
    """``416``: the range asked starts past the file's end (its size in ``Content-Range``)."""
    answer = error_response(
        request, 416, "range-not-satisfiable", f"the file has {size} bytes", {"size": size}
    )
    answer.headers["Content-Range"] = f"bytes */{size}"
    return answer


def _streamed(found: ExportObject, name: str) -> Response:
    """An export read from the bucket, whole (``200``) or a part (``206``)."""
    headers = {
        "Accept-Ranges": "bytes",
        "Content-Length": str(found.length),
        "Content-Disposition": f'attachment; filename="{name}"',
    }
    if found.etag:
        headers["ETag"] = found.etag
    if found.content_range:
        headers["Content-Range"] = found.content_range
    media_type = MEDIA_TYPES[name.rsplit(".", 1)[1]]
    status = 206 if found.content_range else 200
    return StreamingResponse(found.chunks, status, headers, media_type)


_endpoint = functools.partial(Endpoint, "GET", tag="tiles")
#: an export: the layer, and the layer of its coverage
_EXPORT = Rule("operator", layers=("id", "coverage_layer"))
_EXPORTED = {"200": json_body(ExportResult, "The export: its file and download URL")}

ENDPOINTS = [
    Endpoint(
        "POST",
        "/gis-layer-export/{id}",
        post_layer_export,
        rule=_EXPORT,
        budget="jobs",
        query=ExportQuery,
        body=CoverageBody,
        body_optional=True,
        answer=_EXPORTED,
        errors=(404, 409, 422),
        job=EXPORT,
        resolves="any",
        tag="tiles",
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
                    for t in MEDIA_TYPES.values()
                },
            },
            "206": {"description": "The part of the file a `Range` header asked"},
        },
        errors=(404, 416),
    ),
]
