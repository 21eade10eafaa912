"""The operations of the raster routes (``api.routes.raster``)."""

from __future__ import annotations

from api.openapi.models import CompressResult, RasterConfig, RasterInfo, RasterListing, RasterStat
from api.openapi.operation import Operation, heavy, json_body
from api.openapi.parameters import NOCACHE, RASTER_ID, param, text
from shared.raster.paths import MAX_PATH_BYTES
from shared.raster.resampling import DEFAULT_RESAMPLING, LayerResampling

__all__ = ["operations"]


def operations() -> dict[str, Operation]:
    """The operations of the raster routes by name."""
    return {
        "get_raster_list": Operation(
            "The rasters of a folder (spec 2.1)",
            "rasters",
            [
                text(
                    "query",
                    "folder",
                    "Folder relative to the raster root: map/raster, or the prefix of the"
                    " raster bucket (MAPSVC_RASTER_STORE=s3); default: the root",
                    max_length=MAX_PATH_BYTES,
                ),
                NOCACHE,
            ],
            {"200": json_body(RasterListing, "The listing")},
            [404],
        ),
        "get_raster_config": heavy(
            "Configure the raster at a path as a layer (spec 4.4, 2.2)",
            "rasters",
            [
                text(
                    "path",
                    "path",
                    "File or folder relative to the raster root (map/raster, or the raster"
                    " bucket's prefix)",
                    max_length=MAX_PATH_BYTES,
                    example="single/RGB.byte.tif",
                ),
                param(
                    "query",
                    "resampling",
                    {
                        "type": "string",
                        "enum": [r.value for r in LayerResampling],
                        "default": DEFAULT_RESAMPLING.value,
                    },
                    "How the layer's pixels are interpolated when drawn, and how its previews"
                    " and overviews are reduced: `nearest` keeps the source's own values"
                    " (classes, indices, sharp pixels), `bilinear` and `cubic` blend them"
                    " (imagery); a configuration made with another one is rebuilt",
                ),
                NOCACHE,
            ],
            json_body(RasterConfig, "The layer"),
        ),
        "get_raster_stat": Operation(
            "Statistics of a raster (spec 2.3)",
            "rasters",
            [RASTER_ID, NOCACHE],
            {"200": json_body(RasterStat, "The statistics")},
            [404, 422],
        ),
        "get_raster_info": Operation(
            "Metadata of a layer's raster as gdalinfo -json prints it (spec 2.4)",
            "rasters",
            [
                RASTER_ID,
                text(
                    "query",
                    "file",
                    "A file of the layer, relative to the raster root",
                    max_length=MAX_PATH_BYTES,
                ),
                NOCACHE,
            ],
            {"200": json_body(RasterInfo, "The metadata")},
            [404, 422],
        ),
        "get_layer_compress": heavy(
            "Compress a layer's rasters into commpress (spec 4.3)",
            "rasters",
            [RASTER_ID],
            json_body(CompressResult, "The compressed files"),
        ),
    }
