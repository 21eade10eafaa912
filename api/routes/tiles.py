"""Tiles: ``rtile`` (spec 4.1; BBOX renders, debug), pre-tiling (4.2), the speed test (4.7)."""

from __future__ import annotations

import functools
import shlex
import time
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, WithJsonSchema
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.access import Rule
from api.answers import image_response, render_box, tile_image
from api.coverage import CoverageBody, CoverageQuery, coverage_of
from api.endpoint import Endpoint
from api.fields import (
    AtMost,
    Box,
    Flag,
    JobQuery,
    Lang,
    Query,
    Srs,
    Text,
    style_id,
)
from api.job_reply import JobStart
from api.links import api_prefix, tile_template
from api.openapi.answers import any_of, json_body
from api.openapi.models import (
    PretilePlan,
    PretileResult,
    RasterTileJson,
    Schema,
    SpeedTest,
    TileDebug,
    ref,
)
from api.rendering import RenderQuery, rendering_pairs
from api.scope import principal_of
from api.services import services
from shared import job_messages as messages
from shared.base.formats import (
    RETINA,
    VARIANTS,
    TileFormat,
    TileVariant,
    parse_variant,
    tile_url_template,
)
from shared.base.grid import MAX_ZOOM, RenderArea, parse_tile
from shared.errors import InvalidInputError
from shared.params import Bbox, parse_bbox, parse_time_or_age
from shared.queues import PRETILE, SPEED_TEST
from shared.raster.paths import MAX_ID_CHARS, RASTER_LAYER_EXAMPLE
from shared.raster.rendering import Rendering
from shared.seeding.coverage import Coverage
from shared.seeding.plan import (
    DEFAULT_MAXZOOM,
    DEFAULT_MINZOOM,
    check_ceiling,
    check_pace,
    plan_pretile,
)
from shared.seeding.pretile import LayerLock
from shared.tiles.store import etag_of, rendering_folder
from shared.tiles.styles import StyleInfo

__all__ = ["ACCESS_QUERY", "ENDPOINTS", "image_response", "render_box", "tile_image"]

_SIDE = 2**MAX_ZOOM - 1
#: the row of a tile URL, then ``@2x`` for the tile at twice the pixels
_ROW_PATTERN = rf"^[0-9]{{1,8}}({RETINA})?$"
_READ = Rule("reader", layers=("style",), public=True)


class TileQuery(RenderQuery):
    """A tile of a layer (the path), or a BBOX render of it (the query); a raster layer drawn
    with TiTiler's rendering parameters when given."""

    style: str = style_id()
    lang: Lang = Field("", description="Label language (a configured language tag)")
    z: int = Field(ge=0, le=MAX_ZOOM, description="Zoom", examples=[8])
    x: int = Field(ge=0, le=_SIDE, description="Column, 0..2^z-1", examples=[72])
    y: str = Field(
        pattern=_ROW_PATTERN,
        max_length=8 + len(RETINA),
        description=f"Row, 0..2^z-1; `<row>{RETINA}`: the tile at 512 px, drawn with Mapnik's"
        " scale factor 2 (a BBOX render at twice `width` and `height`)",
        examples=["110"],
    )
    BBOX: Box | None = Field(None, description="Render this box: minx,miny,maxx,maxy (min < max)")
    bbox: Box | None = Field(None, description="Alternative spelling of `BBOX`")
    width: Annotated[int, AtMost("tiles.max_size")] = Field(
        256, ge=1, description="Width of a BBOX render in pixels"
    )
    height: Annotated[int, AtMost("tiles.max_size")] = Field(
        256, ge=1, description="Height of a BBOX render in pixels"
    )
    srs: Srs | None = Field(None, description="CRS of the BBOX (default EPSG:3857)")
    crs: Srs | None = Field(None, description="Alternative spelling of `srs`")
    nocache: Flag = Field(False, description="1: bypass the cache and compute afresh")
    debug: Flag = Field(
        False, description="1: answer the tile's debug object (spec 2.6) instead of the image"
    )
    is_s3: Flag = Field(False, alias="isS3", description="1: the tile cache is the S3 bucket")

    @property
    def render_srs(self) -> str:
        """The CRS of a BBOX render."""
        return self.srs or self.crs or "EPSG:3857"

    def box(self) -> Bbox | None:
        """The box to render (in :attr:`render_srs`), or None for a tile.

        Raises:
            InvalidInputError: not four numbers with min < max inside the CRS's area.
        """
        for name in ("BBOX", "bbox"):
            if (raw := getattr(self, name)) is not None:
                return parse_bbox(raw, name, self.render_srs)
        return None


def _variant_name(name: str, info: ValidationInfo) -> str:
    TileVariant.from_name(name, info.field_name or "format")  # an unknown one is refused
    return name


class TileFormatQuery(TileQuery):
    """A tile in a format the path names."""

    format: Annotated[
        str,
        AfterValidator(_variant_name),
        WithJsonSchema({"type": "string", "enum": [*(f.value for f in TileFormat), "jpeg"]}),
    ] = Field(
        description="Image format: `png` (full colour, transparent outside the data), `webp`"
        " (lossy at `MAPSVC_WEBP_QUALITY`, or lossless with `MAPSVC_WEBP_LOSSLESS`), `jpg` or"
        " `jpeg` (quality `MAPSVC_JPEG_QUALITY`, white where the map is transparent); each is"
        " cached apart",
        examples=["webp"],
    )


class StyleQuery(Query):
    """A layer named by the path."""

    style: str = style_id()


class TileJsonQuery(StyleQuery, RenderQuery):
    """A layer's TileJSON: the language, format and scale of the tiles it points at (the
    format's and scale's names are TiTiler's), and the rendering parameters its tile URLs
    carry."""

    lang: Lang = Field("", description="Label language of the tiles (a configured language tag)")
    tile_format: Literal["png", "webp", "jpg", "jpeg"] = Field(
        "png", description="The tiles' image format (`jpeg` is `jpg`)"
    )
    tile_scale: int = Field(1, ge=1, le=2, description="2: tiles at 512 px (`@2x`)")

    @property
    def variant(self) -> TileVariant:
        """The tiles asked for."""
        return TileVariant(TileFormat.from_extension(self.tile_format), self.tile_scale)


class PretileQuery(CoverageQuery):
    """What to pre-tile: a layer, its zooms, language and tile format, and its coverage."""

    id: str = Text(MAX_ID_CHARS, description="Layer id", examples=[RASTER_LAYER_EXAMPLE])
    minzoom: int = Field(DEFAULT_MINZOOM, ge=0, le=MAX_ZOOM, description="First zoom")
    maxzoom: int = Field(DEFAULT_MAXZOOM, ge=1, le=MAX_ZOOM + 1, description="End zoom, excluded")
    lang: Lang = Field("", description="Label language (a configured language tag)")
    tile_format: Annotated[
        str,
        AfterValidator(_variant_name),
        WithJsonSchema({"type": "string", "enum": [v.name for v in VARIANTS]}),
    ] = Field(
        TileFormat.PNG.value,
        description="The tiles to make, as their URLs end: `png` (default), `webp`, `jpg`,"
        " each with `@2x`",
    )
    nocache: Flag = Field(False, description="1: render again the tiles already cached")
    refresh_before: str | None = Field(
        None,
        max_length=40,
        description="Render again the cached tiles written before this: an ISO 8601 time"
        " (`2026-11-01T06:00:00Z`) or an age (`7d`, `12h`, `30m`, `45s`, `2w`)",
        examples=["7d"],
    )
    max_tiles_per_s: float | None = Field(
        None,
        gt=0,
        le=1_000_000,
        description="Pace of the run: at most this many tiles a second (at least 2 x 64 /"
        " `MAPSVC_JOB_STALL_S`: 0.142 by default, a chunk every 7.5 min)",
    )
    is_s3: Flag = Field(False, alias="isS3", description="1: tile into the S3 bucket")
    dryrun: Flag = Field(False, description="1: answer the plan, render nothing")


class SpeedTestQuery(JobQuery):
    """The layer whose tiling is timed."""

    layer: str = Text(MAX_ID_CHARS, description="Layer id", examples=[RASTER_LAYER_EXAMPLE])
    lang: Lang = Field("", description="Label language (a configured language tag)")


async def _bbox_render(
    request: Request, query: TileQuery, variant: TileVariant, bbox: Bbox
) -> Response:
    """A render of ``bbox``, ``width`` x ``height`` pixels (twice each for ``@2x``)."""
    area = RenderArea(bbox, query.width, query.height, query.render_srs.lower())
    rendering = query.rendering()
    data = await render_box(request, query.style, query.lang, area, variant, rendering=rendering)
    max_age = services(request).settings.tiles.max_age_s
    return image_response(request, data, variant.format, "MISS", max_age, etag_of(data))


async def get_tile(request: Request, query: TileQuery, layer: StyleInfo) -> Response:
    """A tile of a style, ``<y>[@2x].<format>``, or a BBOX render; ``debug=1``: its debug object."""
    extension = query.format if isinstance(query, TileFormatQuery) else TileFormat.PNG
    row, variant = parse_variant(query.y, extension)
    tile = parse_tile(query.z, query.x, row)
    bbox = query.box()
    if bbox is not None:
        return await _bbox_render(request, query, variant, bbox)
    style, lang = query.style, query.lang
    if query.debug:
        out = f"{style}-{tile.z}-{tile.x}-{tile.y}.png"
        argv = ["mapsvc", "render-tile", style, str(tile.z), str(tile.x), str(tile.y)]
        argv += ["--lang", lang, "--out", out]
        bbound = services(request).tiles.bbound(style, tile)
        return JSONResponse({"bbound": bbound, "cmd": shlex.join(argv)})
    return await tile_image(
        request,
        style,
        lang,
        tile,
        variant,
        is_s3=query.is_s3,
        refresh=query.nocache,
        rendering=query.rendering(layer.band_count),
    )


class TileAccessQuery(StyleQuery, RenderQuery):
    """A layer named by the path, and the rendering parameters of the tiles asked."""


#: what the access check reads of a query: the credential and the rendering parameters
ACCESS_QUERY = frozenset({"api_key", *RenderQuery.model_fields})


async def get_tile_access(request: Request, query: TileAccessQuery, layer: StyleInfo) -> Response:
    """Whether the caller may read the layer's tiles: ``204`` naming the caller
    (``X-Principal``: its principal's id) and, for rendering parameters, the folder their tiles
    are cached in (``X-Tile-Folder``: ``~<key>``, after the language's); else the error a tile
    would get.

    The nginx front asks it (``auth_request``, with exactly the client's ``Authorization``
    header and query) before it sends a cached tile to a caller with credentials, or one asked
    with rendering parameters; keeps a yes a few seconds per style, credential and query as
    sent; and counts the tiles budget per principal. A query with anything else (``nocache``,
    ``bbox``, …) is ``400``: the tile route answers it itself.
    """
    headers = {"X-Principal": principal_of(request).id}
    folder = rendering_folder(query.rendering(layer.band_count))
    if folder:
        headers["X-Tile-Folder"] = folder
    return Response(status_code=204, headers=headers)


def _tilejson(info: StyleInfo, tiles: str, rendering: Rendering | None = None) -> dict[str, Any]:
    """A raster layer as TileJSON 3.0.0, its tiles at the URL template ``tiles``.

    ``maxzoom`` is the layer's own (:attr:`StyleInfo.maxzoom`); the tile routes still draw
    every zoom up to ``MAX_ZOOM``. ``rendering`` is how the tiles are drawn: the parameters
    asked, else the layer's own (null: as imagery); ``statistics`` those of its bands.
    """
    w, s, e, n = info.footprint
    asked = rendering.to_json() if rendering is not None and not rendering.empty else None
    return {
        "tilejson": "3.0.0",
        "id": info.style,
        "name": info.style,
        "bounds": [w, s, e, n],
        "center": [round((w + e) / 2, 7), round((s + n) / 2, 7), 0],
        "minzoom": 0,
        "maxzoom": info.maxzoom,
        "scheme": "xyz",
        "tiles": [tiles],
        "rendering": asked or info.rendering,
        "statistics": info.statistics,
    }


async def get_tilejson(request: Request, query: TileJsonQuery, layer: StyleInfo) -> Response:
    """A raster layer as TileJSON 3.0.0: its bounds, zooms and tile URL template.

    ``tiles`` is one absolute template of the layer's tiles in the language, format and scale
    asked (``lang``, ``tile_format``, ``tile_scale``): under ``MAPSVC_PUBLIC_URL``, else the
    request's checked host. Asked with ``api_key=<key>``, the template carries it; asked with
    an ``Authorization`` header, it carries no credential. This answer is never cached.
    """
    rendering = query.rendering(layer.band_count)
    path = tile_url_template(api_prefix(request), query.style, query.lang, query.variant)
    template = tile_template(request, path, params=rendering_pairs(rendering))
    return JSONResponse(_tilejson(layer, template, rendering))


async def get_layer_pretile(
    request: Request, query: PretileQuery, body: CoverageBody | None = None, *, layer: StyleInfo
) -> Response | JobStart:
    """Pre-tile a layer (spec 4.2); ``dryrun=1`` answers the plan.

    ``tile_format`` names the tiles made: ``png`` (the default), ``webp``, ``jpg``, each with
    ``@2x``.
    Only the tiles that meet the coverage are made: ``bbox`` (in ``bbox_crs``), the polygons of
    ``coverage_layer`` that ``where`` picks, or (``POST``) a GeoJSON polygon; else the layer's
    footprint. ``buffer`` grows each tile by that many pixels.

    A plan above ``MAPSVC_PRETILE_MAX_TILES`` is ``422`` with the plan; while a run of the
    layer goes on, any other run of it (whatever its language or zooms) is ``409`` naming it.
    """
    svc = services(request)
    settings = svc.settings
    style = query.id
    ceiling = settings.tiles.pretile_max_tiles
    refresh_before = None
    if query.refresh_before is not None:
        if query.nocache:
            raise InvalidInputError(
                "nocache=1 renders every tile again: give it or refresh_before, not both",
                parameter="refresh_before",
            )
        refresh_before = parse_time_or_age(query.refresh_before, time.time())
    if query.max_tiles_per_s is not None:
        check_pace(query.max_tiles_per_s, settings.jobs.stall_s)
    coverage = await coverage_of(request, query, body)
    if coverage is None and query.buffer:
        coverage = Coverage.box(layer.footprint, query.buffer)
    area = layer.footprint if coverage is None else coverage
    plan = await run_in_threadpool(
        plan_pretile, area, query.minzoom, query.maxzoom, ceiling=ceiling
    )
    if query.dryrun:
        return JSONResponse(plan)
    check_ceiling(plan)
    message = messages.Pretile(
        style,
        query.lang,
        query.minzoom,
        query.maxzoom,
        refresh=query.nocache,
        s3=query.is_s3,
        variant=TileVariant.from_name(query.tile_format).name,
        coverage=None if coverage is None else coverage.to_json(),
        refresh_before=refresh_before,
        max_tiles_per_s=query.max_tiles_per_s,
    )
    lock = LayerLock(svc.jobs.store, style, settings.jobs.time_limit_s)
    return JobStart(message, lock=lock, doing="pre-tiled")


async def post_layer_pretile(
    request: Request, query: PretileQuery, body: CoverageBody, layer: StyleInfo
) -> Response | JobStart:
    """Pre-tile a layer over the GeoJSON polygon of the body; ``dryrun=1`` answers the plan."""
    return await get_layer_pretile(request, query, body, layer=layer)


async def get_speed_test(request: Request, query: SpeedTestQuery, layer: StyleInfo) -> JobStart:
    """The tiling speed test of a layer (spec 4.7)."""
    return JobStart(messages.SpeedTest(query.layer, query.lang))


def _tile_ok(formats: list[TileFormat]) -> dict[str, Schema]:
    """The answers of a tile route whose image is one of ``formats``."""
    image: Schema = {"schema": {"type": "string", "format": "binary"}}
    return {
        "200": {
            "description": "The tile, or (`debug=1`) the tile's debug object",
            "content": {
                **{f.media_type: image for f in formats},
                "application/json": {"schema": ref(TileDebug)},
            },
        },
        "304": {"description": "Not modified (`If-None-Match` matched the `ETag`)"},
    }


_PNG, _ANY_FORMAT = _tile_ok([TileFormat.PNG]), _tile_ok(list(TileFormat))
#: an endpoint of the tiles: a GET of their group
_endpoint = functools.partial(Endpoint, "GET", tag="tiles")


def _tile(path: str, name: str, summary: str, query: type[TileQuery]) -> Endpoint:
    """A tile route: the same handler, rule and budget under each of its URL forms."""
    answer = _ANY_FORMAT if query is TileFormatQuery else _PNG
    return _endpoint(
        path,
        get_tile,
        rule=_READ,
        budget="tiles",
        query=query,
        answer=answer,
        errors=(404, 422),
        name=name,
        summary=summary,
        resolves="raster",
    )


#: pre-tiling: the layer, and the layer of its coverage
_PRETILE = Rule("operator", layers=("id", "coverage_layer"))
_PRETILED = {"200": any_of("The plan (`dryrun=1`) or the job's result", PretilePlan, PretileResult)}

#: `{y}` is the row, or the row and `@2x`; the `.png` forms first, then any other format
ENDPOINTS = [
    _tile(
        "/rtile/{style}/{lang}/{z}/{x}/{y}.png",
        "get_tile",
        "A PNG tile of a layer, a BBOX render, or the tile's debug object (spec 4.1)",
        TileQuery,
    ),
    _tile(
        "/rtile/{style}/{z}/{x}/{y}.png",
        "get_tile_nolang",
        "A PNG tile of a layer (spec 4.1's form; language from `lang`)",
        TileQuery,
    ),
    _tile(
        "/rtile/{style}/{lang}/{z}/{x}/{y}.{format}",
        "get_tile_format",
        "A tile of a layer as PNG, WebP or JPEG, or a BBOX render in that format",
        TileFormatQuery,
    ),
    _tile(
        "/rtile/{style}/{z}/{x}/{y}.{format}",
        "get_tile_nolang_format",
        "A tile of a layer as PNG, WebP or JPEG (language from `lang`)",
        TileFormatQuery,
    ),
    _endpoint(
        "/rtile/{style}/access",
        get_tile_access,
        rule=_READ,
        budget="tiles",  # asked once per query and key by the front (it keeps the answer)
        query=TileAccessQuery,
        answer={
            "204": {
                "description": "The caller may read the layer's tiles",
                "headers": {
                    "X-Principal": {
                        "schema": {"type": "string"},
                        "description": "The caller's principal id (its tiles budget)",
                    },
                    "X-Tile-Folder": {
                        "schema": {"type": "string", "pattern": "^~[0-9a-f]+$"},
                        "description": "With rendering parameters: what their tiles' cache"
                        " folder adds to the language's (`<style>/<lang>~<key>/…`)",
                    },
                },
            }
        },
        errors=(400, 401, 403, 404),
        resolves="raster",
    ),
    _endpoint(
        "/rtile/{style}/tilejson.json",
        get_tilejson,
        rule=_READ,
        budget="data",
        query=TileJsonQuery,
        answer={"200": json_body(RasterTileJson, "The layer")},
        errors=(404, 422),
        resolves="raster",
    ),
    _endpoint(
        "/gis-layer-pretile/{id}",
        get_layer_pretile,
        rule=_PRETILE,
        budget="jobs",
        query=PretileQuery,
        answer=_PRETILED,
        job=PRETILE,
        resolves="raster",
    ),
    Endpoint(
        "POST",
        "/gis-layer-pretile/{id}",
        post_layer_pretile,
        rule=_PRETILE,
        budget="jobs",
        query=PretileQuery,
        body=CoverageBody,
        answer=_PRETILED,
        job=PRETILE,
        resolves="raster",
        tag="tiles",
    ),
    _endpoint(
        "/gis-speed-test",
        get_speed_test,
        rule=Rule("operator", layers=("layer",)),
        budget="jobs",
        query=SpeedTestQuery,
        answer={"200": json_body(SpeedTest, "The summary")},
        job=SPEED_TEST,
        resolves="raster",
    ),
]
