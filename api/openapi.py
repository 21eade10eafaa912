"""The OpenAPI 3.1 document of the API, built from the routes and small typed pieces.

Each route of ``api.routes.ROUTES`` is described by the :class:`Operation` of its name (see
``_operations``); the path and method come from the route itself. Response bodies are pydantic
models whose JSON schemas go to ``components.schemas``; every failure is :class:`ErrorResponse`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.json_schema import models_json_schema
from starlette.routing import BaseRoute, Route

from api.routes.pdf import MAX_FILES
from api.routes.providers import MAX_ROUTE_POINTS
from shared.diag import MAX_PROBE_DELAY_MS, MAX_PROBE_STEPS
from shared.params import LANG_PATTERN, SRS_PATTERN
from shared.parcels import CADNUM
from shared.providers.elevation import MAX_POINTS
from shared.providers.routing import PROFILES
from shared.raster.paths import MAX_ID_CHARS, MAX_PATH_BYTES
from shared.settings import Settings
from shared.tiles.grid import MAX_ZOOM
from shared.tiles.pretile import DEFAULT_MAXZOOM, DEFAULT_MINZOOM
from shared.vector.query import GEOMETRY_TYPES

__all__ = ["Operation", "openapi_document", "openapi_path"]

Schema = dict[str, Any]

# -- response bodies -----------------------------------------------------------------------


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorBody(BaseModel):
    """What went wrong: a stable slug, a message for people, and facts about the failure."""

    code: str
    message: str
    detail: dict[str, Any]


class ErrorResponse(BaseModel):
    """The one shape of every failure (4xx and 5xx)."""

    error: ErrorBody


class JobLinks(BaseModel):
    """Where the job and its event stream are."""

    self: str
    events: str


class Job(BaseModel):
    """The job descriptor: state, progress, result or error, links."""

    id: str
    kind: str
    state: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    progress: float | None
    params: dict[str, Any]
    created: str | None
    started: str | None
    finished: str | None
    worker: str | None
    last_line: str | None
    cancel_requested: bool
    result: Any
    error: dict[str, Any] | None
    links: JobLinks


class SseEvent(_Body):
    """One event of a stream: its text (a job line) and its stream entry id."""

    data: str
    id: str | None = None


class Health(BaseModel):
    """The process is alive."""

    status: Literal["ok"]


class Ready(BaseModel):
    """Every dependency answered."""

    status: Literal["ready"]
    checks: dict[str, dict[str, Any]]


class RasterRow(BaseModel):
    """A raster of a listing (spec 2.1)."""

    id: str
    name: str
    islayer: bool
    filename: str
    path: str
    type: Literal["dir", "file"]


class RasterListing(BaseModel):
    """The rasters of a folder (spec 2.1)."""

    time: int
    folder: str
    rows: list[RasterRow]


class RasterConfig(_Body):
    """A raster configured as a layer (spec 2.2), with the layer id added."""

    id: str
    layer: str
    extent: list[float]
    url: str


class RasterStatTimes(_Body):
    """Times, size and count of a raster (spec 2.3 ``stat``)."""

    cdate: str
    edate: str
    size: int | None
    count: int


class RasterStat(_Body):
    """Raster statistics (spec 2.3)."""

    time: int
    type: Literal["file", "dir"]
    stat: RasterStatTimes
    files: list[dict[str, Any]]


class RasterInfo(_Body):
    """``gdalinfo -json`` of a layer's raster (spec 2.4)."""

    description: str
    driverShortName: str  # noqa: N815 - gdalinfo's field name
    size: list[int]
    bands: list[dict[str, Any]]


class CompressedFile(_Body):
    """One compressed raster."""

    name: str


class CompressResult(_Body):
    """Where the compressed rasters went."""

    folder: str
    files: list[CompressedFile]


class TileDebug(BaseModel):
    """The tile's corners in the layer's CRS and the command that renders it (spec 2.6)."""

    bbound: list[float]
    cmd: str


class PretileZoom(_Body):
    """One zoom of a pre-tiling plan."""

    zoom: int
    tiles: int


class PretilePlan(_Body):
    """What pre-tiling would render (``dryrun=1``)."""

    minzoom: int
    maxzoom: int
    zooms: list[PretileZoom]
    total: int


class PretileResult(_Body):
    """What a pre-tiling job rendered."""

    plan: dict[str, Any]
    zooms: list[dict[str, Any]]
    rendered: int
    skipped: int


class SpeedTest(_Body):
    """The speed test's summary."""

    style: str
    lang: str
    zooms: list[dict[str, Any]]


class ProbeResult(_Body):
    """The pipeline probe's result."""

    steps: int
    ms: int


class FeatureCollection(_Body):
    """A GeoJSON FeatureCollection."""

    type: Literal["FeatureCollection"]
    features: list[dict[str, Any]]


class Feature(_Body):
    """A GeoJSON Feature."""

    type: Literal["Feature"]
    geometry: dict[str, Any] | None
    properties: dict[str, Any] | None


class VectorLayerEntry(_Body):
    """A layer of a TileJSON document (spec 2.5)."""

    id: str
    fields: dict[str, str]
    minzoom: int
    maxzoom: int
    count: int


class TileJson(_Body):
    """A vector layer as TileJSON 3.0.0 (spec 2.5)."""

    tilejson: str
    id: str
    bounds: list[float]
    center: list[float]
    format: str
    minzoom: int
    maxzoom: int
    scheme: str
    tiles: list[str]
    vector_layers: list[VectorLayerEntry]


class CacheDropped(BaseModel):
    """A layer's vector caches were dropped."""

    layer: str
    epoch: int


class ReverseGeocode(BaseModel):
    """Both providers' answers (spec 2.7); a failed key holds an error object instead."""

    geocoder_a: dict[str, Any]
    map: dict[str, Any]


class Weather(BaseModel):
    """The current weather (spec 2.8)."""

    body: dict[str, Any]


class ElevationLocation(BaseModel):
    """A point of an elevation result."""

    lat: float
    lng: float


class ElevationResult(_Body):
    """The elevation of one point; null where no data covers it."""

    dataset: str
    elevation: float | None
    location: ElevationLocation


class Elevations(_Body):
    """Elevations of points (spec 2.9)."""

    results: list[ElevationResult]
    status: str


class Parcel(BaseModel):
    """A land parcel (spec 2.10)."""

    success: bool
    result: dict[str, Any]


_MODELS: tuple[type[BaseModel], ...] = (
    ErrorResponse,
    Job,
    SseEvent,
    Health,
    Ready,
    RasterListing,
    RasterConfig,
    RasterStat,
    RasterInfo,
    CompressResult,
    TileDebug,
    PretilePlan,
    PretileResult,
    SpeedTest,
    ProbeResult,
    FeatureCollection,
    Feature,
    TileJson,
    CacheDropped,
    ReverseGeocode,
    Weather,
    Elevations,
    Parcel,
)


def _ref(model: type[BaseModel]) -> Schema:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


# -- parameters ----------------------------------------------------------------------------


def _param(
    where: Literal["path", "query", "header"],
    name: str,
    schema: Schema,
    description: str,
    *,
    required: bool = False,
    example: object = None,
) -> Schema:
    param: Schema = {
        "name": name,
        "in": where,
        "required": required or where == "path",
        "description": description,
        "schema": schema,
    }
    if example is not None:
        param["example"] = example
    return param


def _flag(name: str, description: str) -> Schema:
    return _param("query", name, {"type": "string", "enum": ["0", "1"]}, description)


def _int(
    where: Literal["path", "query"], name: str, lo: int, hi: int, description: str, **kw: Any
) -> Schema:
    return _param(where, name, {"type": "integer", "minimum": lo, "maximum": hi}, description, **kw)


def _number(name: str, lo: float, hi: float, description: str, **kw: Any) -> Schema:
    return _param(
        "query", name, {"type": "number", "minimum": lo, "maximum": hi}, description, **kw
    )


def _text(
    where: Literal["path", "query", "header"],
    name: str,
    description: str,
    *,
    pattern: str | None = None,
    max_length: int = 500,
    **kw: Any,
) -> Schema:
    schema: Schema = {"type": "string", "minLength": 1, "maxLength": max_length}
    if pattern is not None:
        schema["pattern"] = pattern
    return _param(where, name, schema, description, **kw)


_NUM = r"-?[0-9]+(\.[0-9]+)?"
_BOX = rf"^{_NUM},{_NUM},{_NUM},{_NUM}$"
_PAIR = rf"{_NUM},{_NUM}"
_RASTER_ID = rf"^[A-Za-z0-9_-]{{1,{MAX_ID_CHARS}}}$"
_JOB_ID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_ENTRY_ID = r"^[0-9]{1,20}(-[0-9]{1,20})?$"
_VECTOR_LAYER = "public.countries"
_RASTER_LAYER = "c2luZ2xlL1JHQi5ieXRlLnRpZg"  # the demo's single/RGB.byte.tif

NOCACHE = _flag("nocache", "1: bypass the cache and compute afresh")
ASYNC = _flag("async", "1: answer 202 with the job at once instead of waiting for it")
LANG = _text("query", "lang", "Label language (a configured language tag)", pattern=LANG_PATTERN)
RASTER_ID = _text(
    "path",
    "id",
    "Raster (layer) id: URL-safe base64 of its path",
    pattern=_RASTER_ID,
    max_length=MAX_ID_CHARS,
    example=_RASTER_LAYER,
)
JOB_ID = _text("path", "job_id", "Job id (a lowercase UUID)", pattern=_JOB_ID, max_length=36)
LAST_EVENT_ID = _text(
    "header", "Last-Event-ID", "Resume after this stream entry id", pattern=_ENTRY_ID
)
AFTER = _text("query", "after", "Resume after this stream entry id", pattern=_ENTRY_ID)
VECTOR_LAYER = _text(
    "path",
    "layer",
    "Vector layer id (`schema.table` or an alias)",
    max_length=200,
    example=_VECTOR_LAYER,
)
X = _number("x", -180, 180, "Longitude, EPSG:4326", required=True, example=30.5241)
Y = _number("y", -90, 90, "Latitude, EPSG:4326", required=True, example=50.45)


def _vector_query() -> list[Schema]:
    return [
        _text("query", "props", "Properties to return: `a,b`"),
        _text("query", "filter", "Conditions `<field><op><value>` separated by `,`"),
        _text("query", "extent", "minx,miny,maxx,maxy in EPSG:4326", pattern=_BOX),
        _text("query", "id", "Features by primary key: `1,2`"),
        _param(
            "query",
            "type",
            {"type": "string", "enum": sorted(GEOMETRY_TYPES)},
            "Only this geometry type (any case)",
        ),
        _text("query", "sql", "Name of a condition registered in the layer config", max_length=100),
    ]


def _tile_query(size: int) -> list[Schema]:
    return [
        _text("query", "BBOX", "Render this box: minx,miny,maxx,maxy (min < max)", pattern=_BOX),
        _text("query", "bbox", "Alternative spelling of `BBOX`", pattern=_BOX),
        _int("query", "width", 1, size, "Width of a BBOX render in pixels (default 256)"),
        _int("query", "height", 1, size, "Height of a BBOX render in pixels (default 256)"),
        _text("query", "srs", "CRS of the BBOX (default EPSG:3857)", pattern=SRS_PATTERN),
        _text("query", "crs", "Alternative spelling of `srs`", pattern=SRS_PATTERN),
        NOCACHE,
        _flag("debug", "1: answer the tile's debug object (spec 2.6) instead of the image"),
        _flag("isS3", "1: the tile cache is the S3 bucket"),
    ]


def _tile_path() -> list[Schema]:
    side = 2**MAX_ZOOM - 1
    return [
        _text("path", "style", "Layer (style) id", max_length=MAX_ID_CHARS, example=_RASTER_LAYER),
        _int("path", "z", 0, MAX_ZOOM, "Zoom", example=8),
        _int("path", "x", 0, side, "Column, 0..2^z-1", example=72),
        _int("path", "y", 0, side, "Row, 0..2^z-1", example=110),
    ]


# -- responses -----------------------------------------------------------------------------

_ERRORS = {
    400: "A malformed parameter, id or path (`invalid-input`, `detail.parameter` names it)",
    403: "Refused on purpose (`forbidden`)",
    404: "No such resource (`not-found`)",
    409: "Clashes with the current state (`conflict`, `cancelled`)",
    413: "The body or a file is too large (`payload-too-large`)",
    422: "Well-formed, but the data cannot be used (`unprocessable`)",
    502: "A provider failed (`upstream-error`)",
    503: "A dependency is down, not configured, or busy (`unavailable`, `not-configured`)",
    520: "A provider answered something unexpected (`upstream-bad-answer`)",
    521: "A provider is unreachable (`upstream-unreachable`)",
    522: "No connection to a provider in time (`upstream-connect-timeout`)",
    524: "A provider did not answer in time (`upstream-timeout`)",
}
_PROVIDER_ERRORS = (502, 503, 520, 521, 522, 524)
_JOB_ERRORS = (404, 409, 422)


def _content(media_type: str, schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {media_type: {"schema": schema}}}


def _json(model: type[BaseModel], description: str) -> Schema:
    return _content("application/json", _ref(model), description)


def _binary(media_type: str, description: str) -> Schema:
    return _content(media_type, {"type": "string", "format": "binary"}, description)


def _job_accepted() -> Schema:
    response = _json(Job, "The job runs on: its descriptor (`Location` names it)")
    response["headers"] = {
        "Location": {"schema": {"type": "string"}, "description": "The job's URL"},
        "X-Job-ID": {"schema": {"type": "string"}, "description": "The job id"},
    }
    return response


_SSE = _content(
    "text/event-stream",
    _ref(SseEvent),
    "Server-Sent Events: `id: <entry id>` and `data: <line>` per line",
)


@dataclass(frozen=True)
class Operation:
    """How one route is called and what it answers; ``errors`` are statuses of the error shape.

    Every operation documents 400 (a bad parameter or ``Host``) and 503 (a dependency) too.
    """

    summary: str
    tag: str
    parameters: Sequence[Schema] = ()
    responses: Mapping[str, Schema] = field(default_factory=dict)
    errors: Sequence[int] = ()
    request_body: Schema | None = None

    def as_dict(self, operation_id: str) -> Schema:
        """The OpenAPI operation object."""
        responses = dict(self.responses)
        for status in sorted({400, 503, *self.errors}):
            responses[str(status)] = _json(ErrorResponse, _ERRORS[status])
        op: Schema = {
            "operationId": operation_id,
            "summary": self.summary,
            "tags": [self.tag],
            "parameters": list(self.parameters),
            "responses": responses,
        }
        if self.request_body is not None:
            op["requestBody"] = self.request_body
        return op


def _heavy(summary: str, tag: str, params: Sequence[Schema], result: Schema) -> Operation:
    return Operation(
        summary,
        tag,
        [*params, ASYNC],
        {"200": result, "202": _job_accepted()},
        _JOB_ERRORS,
    )


def _any_of(description: str, *models: type[BaseModel]) -> Schema:
    schema = {"anyOf": [_ref(m) for m in models]}
    return _content("application/json", schema, description)


_PDF_FORM: Schema = {
    "type": "object",
    "properties": {
        "files": {
            "type": "array",
            "items": {"type": "string", "format": "binary"},
            "maxItems": MAX_FILES,
            "description": "The PDFs, in order (any field name)",
        },
        "output_name": {"type": "string", "maxLength": 200},
        "metadata": {"type": "string", "description": 'JSON object of strings: {"Title": …}'},
    },
    "required": ["files"],
}
_PDF_JSON: Schema = {
    "type": "object",
    "properties": {
        "paths": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
            "maxItems": MAX_FILES,
            "description": "PDFs inside the work dir, relative to it",
        },
        "output_name": {"type": "string", "maxLength": 200},
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["paths"],
    "additionalProperties": False,
}


def _operations(tile_max_size: int, max_features: int) -> dict[str, Operation]:
    tile = [*_tile_path(), *_tile_query(tile_max_size)]
    tile_ok: dict[str, Schema] = {
        "200": {
            "description": "The PNG tile, or (`debug=1`) the tile's debug object",
            "content": {
                "image/png": {"schema": {"type": "string", "format": "binary"}},
                "application/json": {"schema": _ref(TileDebug)},
            },
        },
        "304": {"description": "Not modified (`If-None-Match` matched the `ETag`)"},
    }
    lang_path = _text("path", "lang", "Label language", pattern=LANG_PATTERN, example="en")
    point = [X, Y, LANG, NOCACHE]
    return {
        "get_health": Operation(
            "The process is alive", "system", responses={"200": _json(Health, "Alive")}
        ),
        "get_ready": Operation(
            "Redis, PostgreSQL with PostGIS and a Celery worker answer",
            "system",
            responses={"200": _json(Ready, "Ready")},
        ),
        "get_openapi": Operation(
            "This document",
            "system",
            responses={"200": _content("application/json", {"type": "object"}, "OpenAPI 3.1")},
        ),
        "get_job": Operation(
            "A job's state, progress, result or error",
            "jobs",
            [JOB_ID],
            {"200": _json(Job, "The job descriptor")},
            [404],
        ),
        "delete_job": Operation(
            "Cancel a job",
            "jobs",
            [JOB_ID],
            {
                "200": _json(Job, "The job ended now (it was queued)"),
                "202": _json(Job, "The job stops at its next progress line"),
            },
            [404, 409],
        ),
        "get_job_events": Operation(
            "The job's lines as SSE, from the start (or after Last-Event-ID) to its final line",
            "jobs",
            [JOB_ID, LAST_EVENT_ID, AFTER],
            {"200": _SSE},
            [404],
        ),
        "get_events": Operation(
            "Every job's lines as SSE, each starting with its job id",
            "jobs",
            [LAST_EVENT_ID, AFTER],
            {"200": _SSE},
        ),
        "get_probe": _heavy(
            "The pipeline probe: a job that only reports",
            "jobs",
            [
                _int("query", "steps", 1, MAX_PROBE_STEPS, "Lines to write (default 3)"),
                _int("query", "delay_ms", 0, MAX_PROBE_DELAY_MS, "Pause between lines"),
                _int("query", "fail_at", 0, MAX_PROBE_STEPS, "Fail at this step (0: never)"),
            ],
            _json(ProbeResult, "The probe's result"),
        ),
        "get_raster_list": Operation(
            "The rasters of a folder (spec 2.1)",
            "rasters",
            [
                _text(
                    "query",
                    "folder",
                    "Folder relative to map/raster (default: the root)",
                    max_length=MAX_PATH_BYTES,
                ),
                NOCACHE,
            ],
            {"200": _json(RasterListing, "The listing")},
            [404],
        ),
        "get_raster_config": _heavy(
            "Configure the raster at a path as a layer (spec 4.4, 2.2)",
            "rasters",
            [
                _text(
                    "path",
                    "path",
                    "File or folder relative to map/raster",
                    max_length=MAX_PATH_BYTES,
                    example="single/RGB.byte.tif",
                ),
                NOCACHE,
            ],
            _json(RasterConfig, "The layer"),
        ),
        "get_raster_stat": Operation(
            "Statistics of a raster (spec 2.3)",
            "rasters",
            [RASTER_ID, NOCACHE],
            {"200": _json(RasterStat, "The statistics")},
            [404, 422],
        ),
        "get_raster_info": Operation(
            "Metadata of a layer's raster as gdalinfo -json prints it (spec 2.4)",
            "rasters",
            [
                RASTER_ID,
                _text(
                    "query",
                    "file",
                    "A file of the layer, relative to map/raster",
                    max_length=MAX_PATH_BYTES,
                ),
                NOCACHE,
            ],
            {"200": _json(RasterInfo, "The metadata")},
            [404, 422],
        ),
        "get_layer_compress": _heavy(
            "Compress a layer's rasters into commpress (spec 4.3)",
            "rasters",
            [RASTER_ID],
            _json(CompressResult, "The compressed files"),
        ),
        "get_tile": Operation(
            "A tile of a layer, a BBOX render, or the tile's debug object (spec 4.1)",
            "tiles",
            [tile[0], lang_path, *tile[1:]],
            tile_ok,
            [404, 422],
        ),
        "get_tile_nolang": Operation(
            "A tile of a layer (spec 4.1's form; language from `lang`)",
            "tiles",
            [*tile, LANG],
            tile_ok,
            [404, 422],
        ),
        "get_layer_pretile": _heavy(
            "Pre-tile a layer (spec 4.2); `dryrun=1` answers the plan",
            "tiles",
            [
                _text("path", "id", "Layer id", max_length=MAX_ID_CHARS, example=_RASTER_LAYER),
                _int("query", "minzoom", 0, MAX_ZOOM, f"First zoom (default {DEFAULT_MINZOOM})"),
                _int(
                    "query",
                    "maxzoom",
                    1,
                    MAX_ZOOM + 1,
                    f"End zoom, excluded (default {DEFAULT_MAXZOOM})",
                ),
                LANG,
                NOCACHE,
                _flag("isS3", "1: tile into the S3 bucket"),
                _flag("dryrun", "1: answer the plan, render nothing"),
            ],
            _any_of("The plan (`dryrun=1`) or the job's result", PretilePlan, PretileResult),
        ),
        "get_speed_test": _heavy(
            "The tiling speed test of a layer (spec 4.7)",
            "tiles",
            [
                _text(
                    "query",
                    "layer",
                    "Layer id",
                    max_length=MAX_ID_CHARS,
                    required=True,
                    example=_RASTER_LAYER,
                ),
                LANG,
            ],
            _json(SpeedTest, "The summary"),
        ),
        "get_geojson": Operation(
            "Features of a layer as a GeoJSON FeatureCollection (spec 4.8)",
            "vector",
            [
                VECTOR_LAYER,
                *_vector_query(),
                _int("query", "srid", 1, 2**31 - 1, "Output CRS as an EPSG code (default 4326)"),
                _int("query", "limit", 1, max_features, f"Most features (default {max_features})"),
                _int("query", "offset", 0, 2**31 - 1, "Features to skip"),
                _param("query", "geom", {"type": "string", "enum": ["0", "1"]}, "0: no geometry"),
                _flag("debug", "1: add the SQL and its time"),
                _flag("reload", "1: read the layer catalogue again"),
                NOCACHE,
            ],
            {"200": _content("application/geo+json", _ref(FeatureCollection), "The features")},
            [404, 422],
        ),
        "get_datasource": Operation(
            "A vector layer as TileJSON 3.0.0 (spec 2.5, 4.9)",
            "vector",
            [VECTOR_LAYER, NOCACHE],
            {"200": _json(TileJson, "The layer")},
            [404, 422],
        ),
        "get_vtile": Operation(
            "A Mapbox Vector Tile of a layer",
            "vector",
            [VECTOR_LAYER, *_tile_path()[1:], *_vector_query(), NOCACHE],
            {
                "200": _binary("application/vnd.mapbox-vector-tile", "The tile (gzip if asked)"),
                "204": {"description": "No feature falls in the tile"},
            },
            [404, 422],
        ),
        "delete_vtile_cache": Operation(
            "Drop a layer's cached vector tiles and GeoJSON answers",
            "vector",
            [VECTOR_LAYER],
            {"200": _json(CacheDropped, "Dropped")},
            [404],
        ),
        "post_pdf_merge": Operation(
            "Merge PDFs in order (uploaded, or named inside the work dir)",
            "convert",
            responses={"200": _binary("application/pdf", "The merged PDF")},
            errors=[404, 413],
            request_body={
                "required": True,
                "content": {
                    "multipart/form-data": {"schema": _PDF_FORM},
                    "application/json": {"schema": _PDF_JSON},
                },
            },
        ),
        "get_geocode": Operation(
            "Places by name: a GeoJSON FeatureCollection",
            "providers",
            [
                _text("query", "q", "What to look for", required=True, example="Khreshchatyk 12"),
                LANG,
                _int("query", "limit", 1, 50, "Most results (default 10)"),
                _text("query", "bbox", "Only inside west,south,east,north", pattern=_BOX),
                NOCACHE,
            ],
            {"200": _json(FeatureCollection, "The places")},
            _PROVIDER_ERRORS,
        ),
        "get_reverse_geocode": Operation(
            "Places at a point from two geocoders (spec 2.7)",
            "providers",
            point,
            {"200": _json(ReverseGeocode, "Both answers")},
            (404, *_PROVIDER_ERRORS),
        ),
        "get_map_route": Operation(
            "A route through points: a GeoJSON Feature",
            "providers",
            [
                _text(
                    "query",
                    "points",
                    f"2..{MAX_ROUTE_POINTS} lon,lat pairs separated by ';'",
                    pattern=rf"^{_PAIR}(;{_PAIR}){{1,{MAX_ROUTE_POINTS - 1}}}$",
                    required=True,
                    max_length=2000,
                    example="30.5,50.4;30.6,50.45",
                ),
                _param(
                    "query",
                    "profile",
                    {"type": "string", "enum": list(PROFILES)},
                    "Travel mode (default car)",
                ),
                _flag("steps", "1: add the turn-by-turn steps"),
                _flag("alternatives", "1: add alternative routes"),
                NOCACHE,
            ],
            {"200": _json(Feature, "The route")},
            (404, *_PROVIDER_ERRORS),
        ),
        "get_weather": Operation(
            "The current weather at a point (spec 2.8)",
            "providers",
            point,
            {"200": _json(Weather, "The weather")},
            _PROVIDER_ERRORS,
        ),
        "get_height": Operation(
            "Elevations of points (spec 2.9): `x` and `y`, or `locations`",
            "providers",
            [
                _number("x", -180, 180, "Longitude, EPSG:4326 (with y)", example=-109.2),
                _number("y", -90, 90, "Latitude, EPSG:4326 (with x)", example=10.3),
                _text(
                    "query",
                    "locations",
                    f"1..{MAX_POINTS} lat,lng pairs separated by '|'",
                    pattern=rf"^{_PAIR}(\|{_PAIR}){{0,{MAX_POINTS - 1}}}$",
                    max_length=5000,
                ),
                NOCACHE,
            ],
            {"200": _json(Elevations, "The elevations")},
            (404, *_PROVIDER_ERRORS),
        ),
        "get_url_proxy": Operation(
            "Fetch a URL of an allowed host for the client, streamed",
            "providers",
            [
                _text(
                    "query",
                    "url",
                    "http(s) URL on an allowed host",
                    required=True,
                    max_length=4000,
                    example="https://tiles.example.org/0/0/0.png",
                )
            ],
            {"200": {"description": "The fetched body, with its status and content type"}},
            (403, 404, *_PROVIDER_ERRORS),
        ),
        **{
            name: Operation(
                "A land parcel by cadastral number or by point (spec 2.10)",
                "providers",
                [
                    _text(
                        "query",
                        "cad_num",
                        "Cadastral number",
                        pattern=CADNUM.pattern,
                        example="3222486200:03:001:0001",
                    ),
                    _text(
                        "query",
                        "cadNum",
                        "Alternative spelling of `cad_num`",
                        pattern=CADNUM.pattern,
                    ),
                    _number("lng", -180, 180, "Longitude, EPSG:4326 (with lat)"),
                    _number("lat", -90, 90, "Latitude, EPSG:4326 (with lng)"),
                    NOCACHE,
                ],
                {"200": _json(Parcel, "The parcel")},
                (404, *_PROVIDER_ERRORS),
            )
            for name in ("get_parcel", "get_parcel_api")
        },
    }


# -- the document --------------------------------------------------------------------------


def openapi_path(route_path: str) -> str:
    """A Starlette route path as an OpenAPI path: ``{path:path}`` becomes ``{path}``."""
    return "/".join(
        part.split(":", 1)[0] + "}" if part.startswith("{") and ":" in part else part
        for part in route_path.split("/")
    )


@lru_cache(maxsize=1)
def _components() -> dict[str, Schema]:
    _, top = models_json_schema(
        [(model, "serialization") for model in _MODELS],
        ref_template="#/components/schemas/{model}",
    )
    schemas: dict[str, Schema] = top.get("$defs", {})
    return schemas


def openapi_document(routes: Sequence[BaseRoute], settings: Settings, prefix: str) -> Schema:
    """The OpenAPI 3.1 document of ``routes`` as mounted under ``prefix``.

    Args:
        routes: the routes to describe (a route without an operation is left out, which the
            test of the document catches).
        settings: the settings whose limits the parameters state.
        prefix: the mount, ``/api-user`` or ``/api/v1``: the document's server.
    """
    operations = _operations(settings.tile_max_size, settings.geojson_max_features)
    paths: dict[str, Schema] = {}
    for route in routes:
        if not isinstance(route, Route) or route.name not in operations:
            continue
        item = paths.setdefault(openapi_path(route.path), {})
        for method in sorted((route.methods or set()) - {"HEAD"}):
            item[method.lower()] = operations[route.name].as_dict(route.name)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "mapsvc",
            "version": "1",
            "description": "Map-data backend: raster tiles, PostGIS vector data, providers, jobs. "
            'Every failure answers `{"error": {"code", "message", "detail"}}`.',
        },
        "servers": [{"url": prefix}],
        "paths": paths,
        "components": {"schemas": _components()},
    }
