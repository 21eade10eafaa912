"""The catalogue of vector layers: every table or view with a geometry column in the schemas.

Found from the PostGIS catalog (``geometry_columns``) and kept for ``vector.catalog_ttl_s``.
A layer's id is ``schema.table`` (or an alias from the layer config file); schemas, tables
and columns outside the catalogue cannot be reached, and every identifier put into SQL comes
from here, quoted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from shared.errors import InvalidInputError, NotFoundError, UnprocessableError

__all__ = ["Catalogue", "VectorLayer", "ident", "load_config"]

log = logging.getLogger(__name__)

#: Tables above this many rows get estimated counts and extents (exact ones would scan them).
EXACT_BELOW = 100_000
DEFAULT_MINZOOM, DEFAULT_MAXZOOM = 0, 22


def ident(name: str) -> str:
    """A quoted SQL identifier (names come from the catalogue, never from a request)."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class VectorLayer:
    """A table or view with a geometry column."""

    id: str
    schema: str
    table: str
    geometry_column: str
    geometry_type: str
    srid: int
    fields: dict[str, str]
    primary_key: str | None
    bounds: list[float]
    count: int
    minzoom: int
    maxzoom: int
    is_view: bool
    queries: dict[str, str] = field(default_factory=dict)
    #: the simplification of its tiles, in pixels of each zoom (None: the service's)
    simplify: float | None = None

    def simplify_px(self, default: float) -> float:
        """How far its tiles' lines and outlines may be moved, in pixels of the zoom
        (``simplify`` of the layer config file, else ``default``); points never are."""
        if "POINT" in self.geometry_type.upper():
            return 0.0
        return self.simplify if self.simplify is not None else default

    @property
    def relation(self) -> str:
        """The quoted ``schema.table``."""
        return f"{ident(self.schema)}.{ident(self.table)}"

    def check_fields(self, names: list[str], parameter: str) -> None:
        """Refuse names that are not fields of the layer, naming the valid ones.

        Raises:
            InvalidInputError: an unknown field.
        """
        unknown = [n for n in names if n not in self.fields]
        if unknown:
            raise InvalidInputError(
                f"unknown field(s) {', '.join(unknown)} in {parameter}; "
                f"valid fields: {', '.join(self.fields)}",
                parameter=parameter,
                valid=list(self.fields),
            )


def load_config(path: Path | None) -> dict[str, Any]:
    """The layer config file: ``{"layers": {"<alias>": {"table": "schema.table", "minzoom": 0,
    "maxzoom": 14, "simplify": 1.0, "queries": {"<name>": "<SQL condition>"}}}}`` (all
    optional).

    Raises:
        UnprocessableError: the file is not valid JSON of that shape.
    """
    if path is None or not path.is_file():
        return {"layers": {}}
    try:
        config = json.loads(path.read_text())
        if not isinstance(config.get("layers", {}), dict):
            raise ValueError("layers must be an object")
        return {"layers": config.get("layers", {})}
    except (ValueError, AttributeError) as exc:
        raise UnprocessableError(f"the vector layer config {path.name} is invalid: {exc}") from exc


_LAYERS_SQL = text(
    """
    SELECT g.f_table_schema AS schema, g.f_table_name AS table, g.f_geometry_column AS geom,
           g.srid, g.type, c.relkind, c.reltuples::bigint AS estimate, c.oid AS oid
    FROM geometry_columns g
    JOIN pg_namespace n ON n.nspname = g.f_table_schema
    JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = g.f_table_name
    WHERE g.f_table_schema = ANY(:schemas)
    ORDER BY 1, 2, 3
    """
)
_FIELDS_SQL = text(
    """
    SELECT a.attname AS name, format_type(a.atttypid, NULL) AS type
    FROM pg_attribute a
    WHERE a.attrelid = :oid AND a.attnum > 0 AND NOT a.attisdropped
      AND format_type(a.atttypid, NULL) NOT IN ('geometry', 'geography')
    ORDER BY a.attnum
    """
)
_PK_SQL = text(
    """
    SELECT array_agg(a.attname) AS columns
    FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
    WHERE i.indrelid = :oid AND i.indisprimary
    """
)


def _clamp(box: list[float]) -> list[float]:
    # a reprojected extent can overshoot the world by a rounding error (180.00000000000006)
    limits = (180.0, 90.0, 180.0, 90.0)
    return [round(max(-lim, min(lim, v)), 7) for v, lim in zip(box, limits, strict=True)]


class Catalogue:
    """The layers of the configured schemas, found again after a TTL or on demand."""

    def __init__(self, schemas: list[str], config_path: Path | None, ttl_s: int) -> None:
        self.schemas = schemas
        self.config_path = config_path
        self.ttl_s = ttl_s
        self._layers: dict[str, VectorLayer] = {}
        self._loaded_at = float("-inf")
        self._lock = asyncio.Lock()

    async def layers(self, engine: AsyncEngine, *, refresh: bool = False) -> dict[str, VectorLayer]:
        """Every layer by id (and by alias)."""
        async with self._lock:
            if refresh or time.monotonic() - self._loaded_at > self.ttl_s:
                async with engine.connect() as conn:
                    self._layers = await self._discover(conn)
                self._loaded_at = time.monotonic()
            return self._layers

    async def layer(
        self, engine: AsyncEngine, layer_id: str, *, refresh: bool = False
    ) -> VectorLayer:
        """One layer.

        Raises:
            NotFoundError: no such layer in the catalogue.
        """
        layers = await self.layers(engine, refresh=refresh)
        if layer_id not in layers:
            # the caller may see only some layers: the catalogue (gis-datasource) lists those
            raise NotFoundError(
                f"no vector layer {layer_id[:200]!r}; gis-datasource lists the layers",
                layer=layer_id[:200],
            )
        return layers[layer_id]

    async def _discover(self, conn: AsyncConnection) -> dict[str, VectorLayer]:
        config = load_config(self.config_path)["layers"]
        by_table = {str(c.get("table")): (alias, c) for alias, c in config.items()}
        layers: dict[str, VectorLayer] = {}
        rows = (await conn.execute(_LAYERS_SQL, {"schemas": self.schemas})).mappings().all()
        for row in rows:
            name = f"{row['schema']}.{row['table']}"
            if name in layers:
                continue  # a second geometry column: the first one is the layer's
            alias, conf = by_table.get(name, (None, {}))
            try:
                async with conn.begin_nested():
                    layer = await self._describe(conn, name, row, conf)
            except DBAPIError as exc:  # a view that fails or runs past the timeout
                log.warning("vector layer %s left out of the catalogue: %s", name, exc.orig)
                continue
            layers[name] = layer
            if alias:
                layers[alias] = layer
        return layers

    async def _describe(
        self, conn: AsyncConnection, name: str, row: Any, conf: dict[str, Any]
    ) -> VectorLayer:
        fields = {
            r["name"]: r["type"]
            for r in (await conn.execute(_FIELDS_SQL, {"oid": row["oid"]})).mappings()
        }
        pk_columns = (await conn.execute(_PK_SQL, {"oid": row["oid"]})).scalar()
        primary_key = pk_columns[0] if pk_columns and len(pk_columns) == 1 else None
        relation = f"{ident(row['schema'])}.{ident(row['table'])}"
        geom = ident(row["geom"])
        large = row["estimate"] >= EXACT_BELOW
        if large:
            count = int(row["estimate"])
            extent_sql = "SELECT ST_EstimatedExtent(:schema, :table, :geom)::geometry AS box"
        else:
            count = int(
                (await conn.execute(text(f"SELECT count(*) FROM {relation}"))).scalar() or 0
            )
            extent_sql = f"SELECT ST_Extent({geom})::geometry AS box FROM {relation}"
        bounds_sql = text(
            f"""
            WITH e AS ({extent_sql})
            SELECT ST_XMin(b), ST_YMin(b), ST_XMax(b), ST_YMax(b) FROM (
              SELECT ST_Transform(ST_SetSRID(box, :srid), 4326) AS b FROM e WHERE box IS NOT NULL
            ) t
            """
        )
        params = {
            "schema": row["schema"],
            "table": row["table"],
            "geom": row["geom"],
            "srid": row["srid"],
        }
        box = (await conn.execute(bounds_sql, params)).first()
        bounds = _clamp([float(v) for v in box]) if box else [-180.0, -85.0511, 180.0, 85.0511]
        return VectorLayer(
            id=name,
            schema=row["schema"],
            table=row["table"],
            geometry_column=row["geom"],
            geometry_type=row["type"],
            srid=int(row["srid"]),
            fields=fields,
            primary_key=primary_key,
            bounds=bounds,
            count=count,
            minzoom=int(conf.get("minzoom", DEFAULT_MINZOOM)),
            maxzoom=int(conf.get("maxzoom", DEFAULT_MAXZOOM)),
            is_view=row["relkind"] in ("v", "m"),
            queries={str(k): str(v) for k, v in conf.get("queries", {}).items()},
            simplify=float(conf["simplify"]) if conf.get("simplify") is not None else None,
        )
