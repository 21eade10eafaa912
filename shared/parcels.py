"""Land parcels (spec 2.10) from a local PostGIS table, looked up by number or by point.

The table (name: ``MAPSVC_PARCELS_TABLE``) has the text columns ``cadnum`` (unique),
``category``, ``purpose_code``, ``purpose``, ``use``, ``area``, ``unit_area``,
``ownershipcode``, ``ownership``, ``address`` and ``geom geometry(MultiPolygon, 4326)``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import sqlalchemy.exc
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.errors import ProviderNotConfiguredError

__all__ = ["CADNUM", "PARCEL_FIELDS", "parcel_by_cadnum", "parcel_at"]

#: a Ukrainian cadastral number: KOATUU (10 digits), zone, quarter, parcel
CADNUM = re.compile(r"^\d{10}:\d{2}:\d{3}:\d{4}$")
#: the text fields of a parcel, in the order of spec 2.10
PARCEL_FIELDS = (
    "cadnum",
    "category",
    "purpose_code",
    "purpose",
    "use",
    "area",
    "unit_area",
    "ownershipcode",
    "ownership",
    "address",
)


def _quoted(table: str) -> str:
    # the setting is checked against an identifier pattern; quoting keeps case as written
    return ".".join(f'"{part}"' for part in table.split("."))


async def _one(
    engine: AsyncEngine, table: str, where: str, args: dict[str, Any]
) -> dict[str, Any] | None:
    columns = ", ".join(f"{name}::text AS {name}" for name in PARCEL_FIELDS)
    sql = text(
        f"SELECT {columns}, ST_AsGeoJSON(ST_Multi(geom), 7) AS geom, "
        f"ST_AsGeoJSON(ST_Centroid(geom), 7) AS geom_centroid "
        f"FROM {_quoted(table)} WHERE {where} ORDER BY ST_Area(geom) LIMIT 1"
    )
    try:
        async with engine.connect() as conn:
            row = (await conn.execute(sql, args)).mappings().first()
    except sqlalchemy.exc.ProgrammingError as exc:
        if "does not exist" in str(exc.orig):
            raise ProviderNotConfiguredError(
                f"the parcels table {table!r} does not exist (MAPSVC_PARCELS_TABLE)", table=table
            ) from exc
        raise
    if row is None:
        return None
    parcel = {name: row[name] for name in PARCEL_FIELDS}
    parcel["geom"] = json.loads(row["geom"]) if row["geom"] else None
    parcel["geom_centroid"] = json.loads(row["geom_centroid"]) if row["geom_centroid"] else None
    return parcel


async def parcel_by_cadnum(engine: AsyncEngine, table: str, cadnum: str) -> dict[str, Any] | None:
    """The parcel with this cadastral number, as spec 2.10's ``result``, or None.

    Args:
        engine: the async engine of the PostGIS database.
        table: the parcels table (``name`` or ``schema.name``).
        cadnum: a checked cadastral number.

    Returns:
        The parcel, or None when the table has no such number.
    """
    return await _one(engine, table, "cadnum = :cadnum", {"cadnum": cadnum})


async def parcel_at(
    engine: AsyncEngine, table: str, lng: float, lat: float
) -> dict[str, Any] | None:
    """The parcel containing the point (the smallest one where parcels overlap), or None.

    Args:
        engine: the async engine of the PostGIS database.
        table: the parcels table.
        lng: longitude, EPSG:4326.
        lat: latitude, EPSG:4326.

    Returns:
        The parcel, or None when no parcel contains the point.
    """
    where = "ST_Intersects(geom, ST_SetSRID(ST_MakePoint(:lng, :lat), 4326))"
    return await _one(engine, table, where, {"lng": lng, "lat": lat})
