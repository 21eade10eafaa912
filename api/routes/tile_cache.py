"""Truncation and expiry of a layer's cached tiles (issue 25), as jobs.

``GET|POST /gis-layer-truncate/<id>`` removes the cached tiles of a layer for a coverage (the
coverages pre-tiling takes, :mod:`api.coverage`), zooms, variants and languages, from the disk
or the bucket; ``POST /gis-layer-expire/<id>`` removes (or draws again) the tiles an expiry
list names, a ``z/x/y`` a line as osm2pgsql writes them, or a GeoJSON polygon, from every cache
of the layer. ``dryrun=1`` answers the tiles per zoom. The work is the job's
(:mod:`shared.seeding.truncate`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.access import Rule
from api.bodies import capped
from api.coverage import CoverageBody, CoverageQuery, coverage_of
from api.endpoint import Endpoint
from api.fields import Flag, Text
from api.job_reply import JobStart
from api.openapi.answers import any_of
from api.openapi.models import SweepPlan, SweepResult, ref
from api.services import services
from shared import job_messages as messages
from shared.base.formats import VARIANTS, TileVariant
from shared.base.grid import MAX_ZOOM
from shared.errors import InvalidInputError
from shared.queues import EXPIRE, TRUNCATE
from shared.raster.paths import RASTER_LAYER_EXAMPLE
from shared.seeding.expiry import MAX_BYTES, MAX_LINES, expiry_tiles
from shared.seeding.plan import check_zooms
from shared.seeding.tile_sets import CoverageTiles, TileSet
from shared.seeding.truncate import plan_sweep
from shared.settings import LANG_PATTERN
from shared.tiles.styles import StyleInfo
from shared.vector.catalog import VectorLayer

__all__ = ["ENDPOINTS"]

_LAYER_ID = "Layer id: a raster layer's, or a vector layer's (`schema.table` or an alias)"
_LANGS = LANG_PATTERN.strip("^$")


def _variants(text: str | None) -> str | None:
    if text is not None:
        for name in text.split(","):
            TileVariant.from_name(name.strip(), "tile_format")  # an unknown one is refused
    return text


class SweepQuery(CoverageQuery):
    """A layer and the zooms of its cached tiles."""

    id: str = Text(200, description=_LAYER_ID, examples=[RASTER_LAYER_EXAMPLE])
    minzoom: int = Field(0, ge=0, le=MAX_ZOOM, description="First zoom")
    maxzoom: int = Field(MAX_ZOOM + 1, ge=1, le=MAX_ZOOM + 1, description="End zoom, excluded")
    dryrun: Flag = Field(False, description="1: answer the tiles per zoom, remove nothing")


class TruncateQuery(SweepQuery):
    """What to truncate: a layer, a coverage, zooms, variants, languages and the cache."""

    tile_format: Annotated[str | None, AfterValidator(_variants)] = Field(
        None,
        max_length=200,
        description="The variants removed, comma-separated as tile URLs end (`png`, `webp@2x`,"
        f" …: {', '.join(v.name for v in VARIANTS)}); default: every one",
    )
    lang: str | None = Field(
        None,
        max_length=200,
        pattern=rf"^{_LANGS}(,{_LANGS})*$",
        description="The languages removed, comma-separated; default: every one cached",
    )
    is_s3: Flag = Field(False, alias="isS3", description="1: the S3 bucket's tiles, not the disk's")


class ExpireQuery(SweepQuery):
    """What to expire: a layer, the tiles (the body, or a coverage), zooms and the mode."""

    mode: Literal["remove", "rerender"] = Field(
        "remove",
        description="`remove` the tiles, or `rerender` the cached ones of a raster layer"
        " (vector caches are removed either way)",
    )


async def _sweep(
    request: Request,
    query: SweepQuery,
    layer: StyleInfo | VectorLayer,
    tiles: TileSet,
    stores: list[str],
    *,
    variants: list[str] | None = None,
    langs: list[str] | None = None,
    rerender: bool = False,
    changed: bool = False,
) -> Response | JobStart:
    """The plan (``dryrun=1``) or the job of a sweep of ``layer`` (named ``query.id``); a
    vector layer whose data ``changed`` loses its other cached answers too."""
    if query.dryrun:
        return JSONResponse(
            await run_in_threadpool(plan_sweep, tiles, query.minzoom, query.maxzoom)
        )
    check_zooms(query.minzoom, query.maxzoom)
    svc = services(request)
    vector = isinstance(layer, VectorLayer)
    layer_id = layer.id if isinstance(layer, VectorLayer) else layer.style
    names = [query.id]
    if vector:  # the table's id keys its cached tiles; the front's, every name it was asked by
        layers = await svc.vector.layers(svc.db)
        names = sorted({query.id, *(n for n, found in layers.items() if found.id == layer_id)})
    sweep = messages.Sweep(
        layer_id,
        vector,
        tiles.to_json(),
        query.minzoom,
        query.maxzoom,
        variants,
        langs,
        stores,
        rerender,
        {**svc.front_vtiles, "names": names} if vector else None,
        answers=changed and vector,
    )
    if not vector:
        for name in sweep.stores:
            svc.tile_stores.pick(name == "s3")  # 503 now: object storage is not configured
    return JobStart(sweep)


def _names(text: str | None) -> list[str] | None:
    return None if text is None else sorted({name.strip() for name in text.split(",")})


async def post_layer_truncate(
    request: Request,
    query: TruncateQuery,
    body: CoverageBody | None,
    layer: StyleInfo | VectorLayer,
) -> Response | JobStart:
    """Remove a layer's cached tiles for a coverage, zooms, variants and languages.

    The coverage is pre-tiling's: ``bbox`` (in ``bbox_crs``), the polygons of ``coverage_layer``
    that ``where`` picks, or a GeoJSON polygon (the body); without one, every tile. Every variant
    and every language cached go, unless ``tile_format`` or ``lang`` names some; ``isS3=1``: the
    bucket's tiles. A vector layer's tiles are the API's cached answers and the front's.
    ``dryrun=1`` answers the coverage's tiles per zoom.
    """
    coverage = await coverage_of(request, query, body)
    variants = (
        None
        if query.tile_format is None
        else sorted({TileVariant.from_name(n).name for n in _names(query.tile_format) or []})
    )
    return await _sweep(
        request,
        query,
        layer,
        CoverageTiles(coverage),
        ["s3" if query.is_s3 else "file"],
        variants=variants,
        langs=_names(query.lang),
    )


async def post_layer_expire(
    request: Request, query: ExpireQuery, layer: StyleInfo | VectorLayer
) -> Response | JobStart:
    """Expire a layer's cached tiles: those an expiry list names, or meeting a polygon.

    The body is osm2pgsql's expire file (``text/plain``, a ``z/x/y`` a line), those tiles as a
    JSON array of ``"z/x/y"``, or a GeoJSON polygon; or, without a body, ``bbox`` or
    ``coverage_layer``. A tile listed stands for itself, its parents and its children. They go
    from every cache of the layer: every language and variant on the disk and in the bucket, or
    a vector layer's cached answers and the front's; ``mode=rerender`` draws a raster layer's
    cached ones again. ``dryrun=1`` answers the tiles per zoom.
    """
    body = await capped(request, MAX_BYTES, "an expiry list").body()
    if body.strip():
        given = [n for n in ("bbox", "coverage_layer", "where") if getattr(query, n) is not None]
        if given:
            raise InvalidInputError(
                f"name the tiles once: the body, or {given[0]}", parameter=given[0]
            )
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        tiles: TileSet = await run_in_threadpool(expiry_tiles, body, media, query.buffer)
    else:
        coverage = await coverage_of(request, query, None)
        if coverage is None:
            raise InvalidInputError(
                "name the tiles: a z/x/y list or a GeoJSON polygon in the body, bbox, or"
                " coverage_layer",
                parameter="body",
            )
        tiles = CoverageTiles(coverage)
    stores = ["file"] if services(request).tile_stores.s3 is None else ["file", "s3"]
    rerender = query.mode == "rerender"
    return await _sweep(request, query, layer, tiles, stores, rerender=rerender, changed=True)


#: who may truncate or expire: an operator of the layer, and of the layer of its coverage
_RULE = Rule("operator", layers=("id", "coverage_layer"))
_SWEPT = {"200": any_of("The plan (`dryrun=1`) or the job's result", SweepPlan, SweepResult)}
_TRUNCATE = TRUNCATE
_TILE_LIST = {
    "type": "string",
    "description": f"osm2pgsql's expire file: a tile z/x/y a line (at most {MAX_LINES})",
    "example": "12/2200/1343\n12/2201/1343\n",
}
_EXPIRY_BODY = {
    "required": False,
    "description": f"The tiles (at most {MAX_BYTES} bytes); none with `bbox` or `coverage_layer`",
    "content": {
        "text/plain": {"schema": _TILE_LIST},
        "application/json": {
            "schema": {
                "anyOf": [
                    {
                        "type": "array",
                        "items": {
                            "type": "string",
                            "pattern": r"^[0-9]{1,2}/[0-9]{1,8}/[0-9]{1,8}$",
                        },
                        "maxItems": MAX_LINES,
                    },
                    ref(CoverageBody, "validation"),
                ]
            }
        },
    },
}

ENDPOINTS = [
    Endpoint(
        "POST",
        "/gis-layer-truncate/{id}",
        post_layer_truncate,
        rule=_RULE,
        budget="jobs",
        query=TruncateQuery,
        body=CoverageBody,
        body_optional=True,
        answer=_SWEPT,
        errors=(404, 413, 422),
        job=_TRUNCATE,
        resolves="any",
        tag="tiles",
    ),
    Endpoint(
        "POST",
        "/gis-layer-expire/{id}",
        post_layer_expire,
        rule=_RULE,
        budget="jobs",
        query=ExpireQuery,
        body=_EXPIRY_BODY,
        answer=_SWEPT,
        errors=(404, 413, 422),
        job=EXPIRE,
        resolves="any",
        tag="tiles",
    ),
]
