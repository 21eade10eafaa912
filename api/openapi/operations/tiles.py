"""The operations of the raster tile routes (``api.routes.tiles``)."""

from __future__ import annotations

from api.openapi.models import PretilePlan, PretileResult, Schema, SpeedTest, TileDebug, ref
from api.openapi.operation import Operation, any_of, heavy, json_body
from api.openapi.parameters import (
    LANG,
    NOCACHE,
    RASTER_LAYER_EXAMPLE,
    flag,
    integer,
    param,
    text,
    tile_path,
    tile_query,
)
from shared.raster.paths import MAX_ID_CHARS
from shared.settings import LANG_PATTERN
from shared.tiles.formats import RETINA, VARIANTS, TileFormat
from shared.tiles.grid import MAX_ZOOM
from shared.tiles.pretile import DEFAULT_MAXZOOM, DEFAULT_MINZOOM

__all__ = ["operations"]

#: the row of a tile URL, then ``@2x`` for the tile at twice the pixels
_ROW_PATTERN = rf"^[0-9]{{1,8}}({RETINA})?$"
_ROW = text(
    "path",
    "y",
    f"Row, 0..2^z-1; `<row>{RETINA}`: the tile at 512 px, drawn with Mapnik's scale factor 2 "
    "(a BBOX render at twice `width` and `height`)",
    pattern=_ROW_PATTERN,
    max_length=8 + len(RETINA),
    example="110",
)
_FORMAT = param(
    "path",
    "format",
    {"type": "string", "enum": [*(f.value for f in TileFormat), "jpeg"]},
    "Image format: `png` (full colour, transparent outside the data), `webp` (lossy at "
    "`MAPSVC_WEBP_QUALITY`, or lossless with `MAPSVC_WEBP_LOSSLESS`), `jpg` or `jpeg` (quality "
    "`MAPSVC_JPEG_QUALITY`, white where the map is transparent); each is cached apart",
    example="webp",
)

_PRETILE_FORMAT = param(
    "query",
    "format",
    {"type": "string", "enum": [v.name for v in VARIANTS]},
    "The tiles to make, as their URLs end: `png` (default), `webp`, `jpg`, each with `@2x`",
)


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


def operations(tile_max_size: int) -> dict[str, Operation]:
    """The operations of the tile routes by name; a BBOX render is at most ``tile_max_size``."""
    style, z, x, _ = tile_path()
    query = tile_query(tile_max_size)
    lang_path = text("path", "lang", "Label language", pattern=LANG_PATTERN, example="en")
    png, any_format = _tile_ok([TileFormat.PNG]), _tile_ok(list(TileFormat))
    return {
        "get_tile": Operation(
            "A PNG tile of a layer, a BBOX render, or the tile's debug object (spec 4.1)",
            "tiles",
            [style, lang_path, z, x, _ROW, *query],
            png,
            [404, 422],
        ),
        "get_tile_nolang": Operation(
            "A PNG tile of a layer (spec 4.1's form; language from `lang`)",
            "tiles",
            [style, z, x, _ROW, *query, LANG],
            png,
            [404, 422],
        ),
        "get_tile_format": Operation(
            "A tile of a layer as PNG, WebP or JPEG, or a BBOX render in that format",
            "tiles",
            [style, lang_path, z, x, _ROW, _FORMAT, *query],
            any_format,
            [404, 422],
        ),
        "get_tile_nolang_format": Operation(
            "A tile of a layer as PNG, WebP or JPEG (language from `lang`)",
            "tiles",
            [style, z, x, _ROW, _FORMAT, *query, LANG],
            any_format,
            [404, 422],
        ),
        "get_tile_access": Operation(
            "Whether the caller may read the layer's tiles: `204`, else the error a tile would "
            "get (the nginx front asks it before it sends a cached tile of a layer that is not "
            "public)",
            "tiles",
            [style],
            {
                "204": {
                    "description": "The caller may read the layer's tiles",
                    "headers": {
                        "X-Principal": {
                            "schema": {"type": "string"},
                            "description": "The caller's principal id (its tiles budget)",
                        }
                    },
                }
            },
            [401, 403, 404],
        ),
        "get_layer_pretile": heavy(
            "Pre-tile a layer (spec 4.2); `dryrun=1` answers the plan",
            "tiles",
            [
                text(
                    "path", "id", "Layer id", max_length=MAX_ID_CHARS, example=RASTER_LAYER_EXAMPLE
                ),
                integer("query", "minzoom", 0, MAX_ZOOM, f"First zoom (default {DEFAULT_MINZOOM})"),
                integer(
                    "query",
                    "maxzoom",
                    1,
                    MAX_ZOOM + 1,
                    f"End zoom, excluded (default {DEFAULT_MAXZOOM})",
                ),
                LANG,
                _PRETILE_FORMAT,
                NOCACHE,
                flag("isS3", "1: tile into the S3 bucket"),
                flag("dryrun", "1: answer the plan, render nothing"),
            ],
            any_of("The plan (`dryrun=1`) or the job's result", PretilePlan, PretileResult),
        ),
        "get_speed_test": heavy(
            "The tiling speed test of a layer (spec 4.7)",
            "tiles",
            [
                text(
                    "query",
                    "layer",
                    "Layer id",
                    max_length=MAX_ID_CHARS,
                    required=True,
                    example=RASTER_LAYER_EXAMPLE,
                ),
                LANG,
            ],
            json_body(SpeedTest, "The summary"),
        ),
    }
