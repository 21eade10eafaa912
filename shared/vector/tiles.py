"""Mapbox Vector Tiles made by PostGIS (``ST_AsMVT``), and the layer's TileJSON (spec 2.5)."""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.base.grid import TileAddress
from shared.metrics import VECTOR_SECONDS, timed
from shared.vector.catalog import VectorLayer, ident
from shared.vector.db import pyformat, read_pool
from shared.vector.features import db_error, own_timeout
from shared.vector.query import LayerQuery, where_sql

__all__ = ["EXTENT", "tilejson", "vector_tile"]

EXTENT, BUFFER = 4096, 64
#: the width of the Web Mercator world, in metres
_WORLD_M = 2 * 20037508.342789244


@timed(VECTOR_SECONDS.labels("tile"))
async def vector_tile(
    engine: AsyncEngine,
    layer: VectorLayer,
    query: LayerQuery,
    tile: TileAddress,
    *,
    max_features: int,
    timeout_ms: int,
    filter_timeout_ms: int | None = None,
    simplify_px: float = 0.0,
) -> bytes:
    """One tile: a single MVT layer named after the layer id (empty bytes when no feature);
    its lines and outlines simplified (Douglas-Peucker, topology of each kept) by
    ``simplify_px`` pixels of the tile's zoom, so that a low zoom of a large polygon layer
    stays small and quick.

    One statement, through the engine's read pool (see :mod:`shared.vector.db`): planned once
    per connection, generically, as planning it with each tile's values costs more than
    running it. A tile that a caller's filter picks is read under ``filter_timeout_ms`` (when
    given), else under ``timeout_ms``, the connection's.

    Raises:
        InvalidInputError: a value that does not fit its field (naming ``filter`` when the
            filter's).
        UnprocessableError: the layer's data cannot be read (a broken view).
        UnavailableError: the statement timeout passed, or the database failed.
    """
    where, params = where_sql(layer, query)
    geom = f"ST_Transform(t.{ident(layer.geometry_column)}, 3857)"
    if simplify_px > 0:
        geom = f"ST_Simplify({geom}, CAST(:tolerance AS float8), true)"
    column = f"t.{ident(layer.geometry_column)}"
    names = query.props if query.props is not None else tuple(layer.fields)
    columns = "".join(f", t.{ident(n)}" for n in names)
    sql = f"""
        WITH bounds AS (
            SELECT ST_TileEnvelope(CAST(:z AS int), CAST(:x AS int), CAST(:y AS int)) AS b
        ),
        features AS (
            SELECT ST_AsMVTGeom({geom}, bounds.b, {EXTENT}, {BUFFER}, true)
                   AS mvt_geom{columns}
            FROM {layer.relation} t, bounds
            WHERE {column} && ST_Transform(bounds.b, {layer.srid}) AND {where}
            LIMIT :max_features
        )
        SELECT ST_AsMVT(features.*, :name, {EXTENT}, 'mvt_geom') FROM features
        WHERE mvt_geom IS NOT NULL
    """
    params = {
        **params,
        "z": tile.z,
        "x": tile.x,
        "y": tile.y,
        "name": layer.id,
        "max_features": max_features,
        # metres of the zoom's pixels (256 px tiles)
        "tolerance": simplify_px * _WORLD_M / (256 << tile.z),
    }
    own_ms = own_timeout(query, timeout_ms, filter_timeout_ms)
    try:
        data = await read_pool(engine).value(pyformat(sql), params, own_ms)
    except psycopg.Error as exc:
        raise db_error(exc, own_ms or timeout_ms, filtered=query.filtered) from exc
    return bytes(data or b"")


def tilejson(layer: VectorLayer, tile_url: str, *, watched: bool) -> dict[str, Any]:
    """The layer's description as TileJSON 3.0.0 (spec 2.5: ``format`` is ``vmt``), and
    whether it is ``watched`` (its edits expire its tiles at once)."""
    w, s, e, n = layer.bounds
    return {
        "tilejson": "3.0.0",
        "id": layer.id,
        "name": layer.id,
        "bounds": layer.bounds,
        "center": [round((w + e) / 2, 7), round((s + n) / 2, 7)],
        "format": "vmt",
        "minzoom": layer.minzoom,
        "maxzoom": layer.maxzoom,
        "scheme": "xyz",
        "tiles": [tile_url],
        "vector_layers": [
            {
                "id": layer.id,
                "fields": layer.fields,
                "minzoom": layer.minzoom,
                "maxzoom": layer.maxzoom,
                "count": layer.count,
            }
        ],
        "watched": watched,
    }
