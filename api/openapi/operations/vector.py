"""The operations of the vector routes (``api.routes.vector``)."""

from __future__ import annotations

from api.openapi.models import CacheDropped, FeatureCollection, TileJson, VectorCatalogue, ref
from api.openapi.operation import Operation, binary, content, json_body
from api.openapi.parameters import (
    NOCACHE,
    VECTOR_LAYER,
    flag,
    integer,
    param,
    tile_path,
    vector_query,
)

__all__ = ["operations"]


def operations(max_features: int) -> dict[str, Operation]:
    """The operations of the vector routes by name; GeoJSON holds at most ``max_features``."""
    return {
        "get_geojson": Operation(
            "Features of a layer as a GeoJSON FeatureCollection (spec 4.8)",
            "vector",
            [
                VECTOR_LAYER,
                *vector_query(),
                integer("query", "srid", 1, 2**31 - 1, "Output CRS as an EPSG code (default 4326)"),
                integer(
                    "query", "limit", 1, max_features, f"Most features (default {max_features})"
                ),
                integer("query", "offset", 0, 2**31 - 1, "Features to skip"),
                param("query", "geom", {"type": "string", "enum": ["0", "1"]}, "0: no geometry"),
                flag("debug", "1: add the SQL and its time"),
                flag("reload", "1: read the layer catalogue again"),
                NOCACHE,
            ],
            {"200": content("application/geo+json", ref(FeatureCollection), "The features")},
            [404, 422],
        ),
        "list_datasources": Operation(
            "The vector layers the caller may read (anonymous: the public ones)",
            "vector",
            [NOCACHE],
            {"200": json_body(VectorCatalogue, "The layers, by id")},
            [],
        ),
        "get_datasource": Operation(
            "A vector layer as TileJSON 3.0.0 (spec 2.5, 4.9)",
            "vector",
            [VECTOR_LAYER, NOCACHE],
            {"200": json_body(TileJson, "The layer")},
            [404, 422],
        ),
        "get_vtile": Operation(
            "A Mapbox Vector Tile of a layer",
            "vector",
            [VECTOR_LAYER, *tile_path()[1:], *vector_query(), NOCACHE],
            {
                "200": binary("application/vnd.mapbox-vector-tile", "The tile (gzip if asked)"),
                "204": {"description": "No feature falls in the tile"},
            },
            [404, 422],
        ),
        "delete_vtile_cache": Operation(
            "Drop a layer's cached vector tiles and GeoJSON answers",
            "vector",
            [VECTOR_LAYER],
            {"200": json_body(CacheDropped, "Dropped")},
            [404],
        ),
    }
