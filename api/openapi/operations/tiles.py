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
    text,
    tile_path,
    tile_query,
)
from shared.raster.paths import MAX_ID_CHARS
from shared.settings import LANG_PATTERN
from shared.tiles.grid import MAX_ZOOM
from shared.tiles.pretile import DEFAULT_MAXZOOM, DEFAULT_MINZOOM

__all__ = ["operations"]


def operations(tile_max_size: int) -> dict[str, Operation]:
    """The operations of the tile routes by name; a BBOX render is at most ``tile_max_size``."""
    tile = [*tile_path(), *tile_query(tile_max_size)]
    tile_ok: dict[str, Schema] = {
        "200": {
            "description": "The PNG tile, or (`debug=1`) the tile's debug object",
            "content": {
                "image/png": {"schema": {"type": "string", "format": "binary"}},
                "application/json": {"schema": ref(TileDebug)},
            },
        },
        "304": {"description": "Not modified (`If-None-Match` matched the `ETag`)"},
    }
    lang_path = text("path", "lang", "Label language", pattern=LANG_PATTERN, example="en")
    return {
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
