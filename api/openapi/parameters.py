"""The parameters of the operations: builders, patterns and the shared parameter objects."""

from __future__ import annotations

from typing import Any, Literal

from api.openapi.models import Schema
from shared.params import SRS_PATTERN
from shared.raster.paths import MAX_ID_CHARS
from shared.settings import LANG_PATTERN
from shared.tiles.grid import MAX_ZOOM
from shared.vector.query import GEOMETRY_TYPES

__all__ = [
    "AFTER",
    "ASYNC",
    "BOX",
    "JOB_ID",
    "LANG",
    "LAST_EVENT_ID",
    "NOCACHE",
    "PAIR",
    "RASTER_ID",
    "RASTER_LAYER_EXAMPLE",
    "VECTOR_LAYER",
    "X",
    "Y",
    "flag",
    "integer",
    "number",
    "param",
    "text",
    "tile_path",
    "tile_query",
    "vector_query",
]


def param(
    where: Literal["path", "query", "header"],
    name: str,
    schema: Schema,
    description: str,
    *,
    required: bool = False,
    example: object = None,
) -> Schema:
    """A parameter object; a path parameter is always required."""
    parameter: Schema = {
        "name": name,
        "in": where,
        "required": required or where == "path",
        "description": description,
        "schema": schema,
    }
    if example is not None:
        parameter["example"] = example
    return parameter


def flag(name: str, description: str) -> Schema:
    """A query flag, ``0`` or ``1``."""
    return param("query", name, {"type": "string", "enum": ["0", "1"]}, description)


def integer(
    where: Literal["path", "query"], name: str, lo: int, hi: int, description: str, **kw: Any
) -> Schema:
    """An integer parameter in ``lo..hi``."""
    return param(where, name, {"type": "integer", "minimum": lo, "maximum": hi}, description, **kw)


def number(name: str, lo: float, hi: float, description: str, **kw: Any) -> Schema:
    """A query number in ``lo..hi``."""
    return param("query", name, {"type": "number", "minimum": lo, "maximum": hi}, description, **kw)


def text(
    where: Literal["path", "query", "header"],
    name: str,
    description: str,
    *,
    pattern: str | None = None,
    max_length: int = 500,
    **kw: Any,
) -> Schema:
    """A non-empty string parameter of at most ``max_length`` characters."""
    schema: Schema = {"type": "string", "minLength": 1, "maxLength": max_length}
    if pattern is not None:
        schema["pattern"] = pattern
    return param(where, name, schema, description, **kw)


_NUM = r"-?[0-9]+(\.[0-9]+)?"
BOX = rf"^{_NUM},{_NUM},{_NUM},{_NUM}$"
PAIR = rf"{_NUM},{_NUM}"
_RASTER_ID = rf"^[A-Za-z0-9_-]{{1,{MAX_ID_CHARS}}}$"
_JOB_ID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_ENTRY_ID = r"^[0-9]{1,20}(-[0-9]{1,20})?$"
_VECTOR_LAYER_EXAMPLE = "public.countries"
RASTER_LAYER_EXAMPLE = "c2luZ2xlL1JHQi5ieXRlLnRpZg"  # the demo's single/RGB.byte.tif

NOCACHE = flag("nocache", "1: bypass the cache and compute afresh")
ASYNC = flag("async", "1: answer 202 with the job at once instead of waiting for it")
LANG = text("query", "lang", "Label language (a configured language tag)", pattern=LANG_PATTERN)
RASTER_ID = text(
    "path",
    "id",
    "Raster (layer) id: URL-safe base64 of its path",
    pattern=_RASTER_ID,
    max_length=MAX_ID_CHARS,
    example=RASTER_LAYER_EXAMPLE,
)
JOB_ID = text("path", "job_id", "Job id (a lowercase UUID)", pattern=_JOB_ID, max_length=36)
LAST_EVENT_ID = text(
    "header", "Last-Event-ID", "Resume after this stream entry id", pattern=_ENTRY_ID
)
AFTER = text("query", "after", "Resume after this stream entry id", pattern=_ENTRY_ID)
VECTOR_LAYER = text(
    "path",
    "layer",
    "Vector layer id (`schema.table` or an alias)",
    max_length=200,
    example=_VECTOR_LAYER_EXAMPLE,
)
X = number("x", -180, 180, "Longitude, EPSG:4326", required=True, example=30.5241)
Y = number("y", -90, 90, "Latitude, EPSG:4326", required=True, example=50.45)


def vector_query() -> list[Schema]:
    """The query parameters that select features of a vector layer."""
    return [
        text("query", "props", "Properties to return: `a,b`"),
        text("query", "filter", "Conditions `<field><op><value>` separated by `,`"),
        text("query", "extent", "minx,miny,maxx,maxy in EPSG:4326", pattern=BOX),
        text("query", "id", "Features by primary key: `1,2`"),
        param(
            "query",
            "type",
            {"type": "string", "enum": sorted(GEOMETRY_TYPES)},
            "Only this geometry type (any case)",
        ),
        text("query", "sql", "Name of a condition registered in the layer config", max_length=100),
    ]


def tile_query(size: int) -> list[Schema]:
    """The query parameters of a raster tile; BBOX renders are at most ``size`` pixels a side."""
    return [
        text("query", "BBOX", "Render this box: minx,miny,maxx,maxy (min < max)", pattern=BOX),
        text("query", "bbox", "Alternative spelling of `BBOX`", pattern=BOX),
        integer("query", "width", 1, size, "Width of a BBOX render in pixels (default 256)"),
        integer("query", "height", 1, size, "Height of a BBOX render in pixels (default 256)"),
        text("query", "srs", "CRS of the BBOX (default EPSG:3857)", pattern=SRS_PATTERN),
        text("query", "crs", "Alternative spelling of `srs`", pattern=SRS_PATTERN),
        NOCACHE,
        flag("debug", "1: answer the tile's debug object (spec 2.6) instead of the image"),
        flag("isS3", "1: the tile cache is the S3 bucket"),
    ]


def tile_path() -> list[Schema]:
    """The path parameters of a tile: layer (style), z, x and y."""
    side = 2**MAX_ZOOM - 1
    return [
        text(
            "path",
            "style",
            "Layer (style) id",
            max_length=MAX_ID_CHARS,
            example=RASTER_LAYER_EXAMPLE,
        ),
        integer("path", "z", 0, MAX_ZOOM, "Zoom", example=8),
        integer("path", "x", 0, side, "Column, 0..2^z-1", example=72),
        integer("path", "y", 0, side, "Row, 0..2^z-1", example=110),
    ]
