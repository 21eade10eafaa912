"""Coordinate systems as gdalinfo prints them: multi-line WKT2, axis mapping, long/lat CRS."""

from __future__ import annotations

import copy
import re
from typing import Any

from rasterio.crs import CRS
from rasterio.errors import RasterioError

__all__ = ["axis_mapping", "coordinate_system", "long_lat_crs", "pretty_wkt"]

_WGS84_SEMI_MAJOR = 6378137.0
_WKT_KEYWORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\[")


def coordinate_system(crs: CRS) -> dict[str, Any]:
    """A ``coordinateSystem`` object: the CRS's multi-line WKT2 and its axis mapping."""
    return {
        "wkt": pretty_wkt(crs.to_wkt(version="WKT2_2019")),
        "dataAxisToSRSAxisMapping": axis_mapping(crs.to_dict(projjson=True)),
    }


def long_lat_crs(crs: CRS) -> tuple[CRS | None, bool]:
    """WGS 84 if the CRS looks like Earth's, else its own geographic CRS in degrees, and which.

    Args:
        crs: the raster's CRS.

    Returns:
        The long/lat CRS (None when there is none) and whether it is WGS 84.
    """
    projjson = crs.to_dict(projjson=True)
    geographic = _geographic_part(projjson)
    if geographic is None:
        return None, False
    datum = geographic.get("datum") or geographic.get("datum_ensemble") or {}
    semi_major = _metres(datum.get("ellipsoid", {}).get("semi_major_axis"))
    if semi_major is None:
        semi_major = _metres(datum.get("ellipsoid", {}).get("radius"))
    if semi_major is not None and abs(semi_major - _WGS84_SEMI_MAJOR) < 10000.0:
        return CRS.from_epsg(4326), True
    for axis in geographic.get("coordinate_system", {}).get("axis", []):
        axis["unit"] = "degree"
    try:
        return CRS.from_dict(geographic, projjson=True), False
    except RasterioError:
        return None, False


def _geographic_part(projjson: dict[str, Any]) -> dict[str, Any] | None:
    """A copy of the geodetic CRS a CRS is built on (its base, or itself), as PROJJSON."""
    crs = projjson
    while crs.get("type") in ("BoundCRS", "CompoundCRS"):
        crs = crs["source_crs"] if crs["type"] == "BoundCRS" else crs["components"][0]
    while "base_crs" in crs:
        crs = crs["base_crs"]
    if not (crs.get("datum") or crs.get("datum_ensemble")):
        return None
    return copy.deepcopy(crs)


def _metres(value: Any) -> float | None:
    if isinstance(value, dict):
        unit = value.get("unit")
        factor = unit.get("conversion_factor", 1.0) if isinstance(unit, dict) else 1.0
        return float(value["value"]) * float(factor)
    return float(value) if value is not None else None


def axis_mapping(projjson: dict[str, Any]) -> list[int]:
    """dataAxisToSRSAxisMapping under GDAL's traditional GIS order (easting first)."""
    crs = projjson
    while crs.get("type") == "BoundCRS":
        crs = crs["source_crs"]
    parts = crs["components"] if crs.get("type") == "CompoundCRS" else [crs]
    axes = [part.get("coordinate_system", {}).get("axis", []) for part in parts]
    mapping = list(range(1, sum(len(a) for a in axes) + 1))
    if len(axes[0]) >= 2:
        first, second = axes[0][0].get("direction"), axes[0][1].get("direction")
        if first in ("north", "south") and second in ("east", "west"):
            mapping[0], mapping[1] = 2, 1
    return mapping


def pretty_wkt(wkt: str) -> str:
    """PROJ's multi-line layout of a one-line WKT2, as gdalinfo asks for it (MULTILINE=YES).

    rasterio only exports one-line WKT. Each keyword node below the root starts a line indented
    four spaces per open node; the axes after ``CS[...]`` sit one level deeper, in the anonymous
    node PROJ's formatter opens for them.
    """
    out: list[str] = []
    stack: list[str] = []  # open nodes; "" is the anonymous one holding a CS's axes
    i, in_string = 0, False
    while i < len(wkt):
        char = wkt[i]
        if in_string:
            if char == '"' and wkt.startswith('""', i):  # an escaped quote
                out.append('""')
                i += 2
                continue
            in_string = char != '"'
        elif char == '"':
            in_string = True
        elif char == "]":
            if stack and stack[-1] == "":
                stack.pop()
            if stack and stack.pop() == "CS" and stack:
                stack.append("")
        elif i == 0 or wkt[i - 1] in ",[":
            keyword = _WKT_KEYWORD.match(wkt, i)
            if keyword:
                if stack and stack[-1] == "" and keyword.group(1) != "AXIS":
                    stack.pop()
                if stack:
                    out.append("\n" + " " * (4 * len(stack)))
                stack.append(keyword.group(1))
                out.append(keyword.group(0))
                i = keyword.end()
                continue
        out.append(char)
        i += 1
    return "".join(out)
