"""Land parcels (spec 2.10): the lookup (local table, then a kadastr.live-compatible provider).

Wire format: ``GET <base>/api/parcels/<cadnum>/`` answers one parcel object (404 when the
number is unknown); ``GET <base>/api/parcels/?lat=&lng=`` answers ``{"count", "results"}``
with the parcels containing the point. A parcel object carries the text fields of spec 2.10
and its geometry as ``geometry`` (or ``geom``), a GeoJSON (Multi)Polygon in EPSG:4326.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from shared.errors import NotFoundError, UpstreamBadAnswerError
from shared.parcels import PARCEL_FIELDS, parcel_at, parcel_by_cadnum
from shared.providers.config import Provider, provider
from shared.providers.upstream import Upstream, round_coord
from shared.settings import Settings

__all__ = ["centroid", "find_parcel", "remote_parcel_at", "remote_parcel_by_cadnum"]


def _ring_centroid(ring: list[list[float]]) -> tuple[float, float, float]:
    """Signed area and area-weighted centroid sums of one ring (shoelace)."""
    a = cx = cy = 0.0
    for (x0, y0), (x1, y1) in zip(ring, ring[1:], strict=False):
        cross = x0 * y1 - x1 * y0
        a += cross
        cx += (x0 + x1) * cross
        cy += (y0 + y1) * cross
    return a / 2, cx, cy


def centroid(geometry: dict[str, Any]) -> dict[str, Any] | None:
    """The centroid of a GeoJSON (Multi)Polygon as a GeoJSON Point (planar, in degrees)."""
    polygons = (
        geometry["coordinates"] if geometry["type"] == "MultiPolygon" else [geometry["coordinates"]]
    )
    area = sx = sy = 0.0
    for polygon in polygons:
        for i, ring in enumerate(polygon):
            a, cx, cy = _ring_centroid([[float(v) for v in p[:2]] for p in ring])
            sign = 1 if i == 0 else -1  # holes subtract, whatever their winding
            sign *= 1 if a >= 0 else -1
            area += sign * a
            sx += sign * cx
            sy += sign * cy
    if area == 0:
        return None
    return {"type": "Point", "coordinates": [sx / (6 * area), sy / (6 * area)]}


def _parcel(raw: Any, provider: str) -> dict[str, Any]:
    if not isinstance(raw, dict) or not isinstance(raw.get("cadnum"), str):
        raise UpstreamBadAnswerError(
            f"provider {provider}: a parcel has no cadnum", provider=provider
        )
    parcel: dict[str, Any] = {
        name: (None if raw.get(name) is None else str(raw[name])) for name in PARCEL_FIELDS
    }
    geometry = raw.get("geom") or raw.get("geometry")
    geom = None
    if isinstance(geometry, dict) and geometry.get("type") in ("Polygon", "MultiPolygon"):
        coords = geometry.get("coordinates")
        if not isinstance(coords, list):
            raise UpstreamBadAnswerError(
                f"provider {provider}: a geometry has no coordinates", provider=provider
            )
        geom = {
            "type": "MultiPolygon",
            "coordinates": coords if geometry["type"] == "MultiPolygon" else [coords],
        }
    parcel["geom"] = geom
    given = raw.get("geom_centroid")
    parcel["geom_centroid"] = (
        given if isinstance(given, dict) else (centroid(geom) if geom else None)
    )
    return parcel


async def remote_parcel_by_cadnum(
    upstream: Upstream, provider: Provider, cadnum: str, *, refresh: bool = False
) -> dict[str, Any] | None:
    """The provider's parcel with this number, or None when it has none (its 404)."""
    try:
        body = await upstream.get_json(provider, f"api/parcels/{cadnum}/", {}, refresh=refresh)
    except NotFoundError:
        return None
    return _parcel(body, provider.name)


async def remote_parcel_at(
    upstream: Upstream, provider: Provider, lng: float, lat: float, *, refresh: bool = False
) -> dict[str, Any] | None:
    """The provider's parcel containing the point, or None."""
    params = {"lat": round_coord(lat), "lng": round_coord(lng)}
    try:
        body = await upstream.get_json(provider, "api/parcels/", params, refresh=refresh)
    except NotFoundError:
        return None
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list):
        raise UpstreamBadAnswerError(
            f"provider {provider.name}: the search answer has no results", provider=provider.name
        )
    return _parcel(results[0], provider.name) if results else None


async def find_parcel(
    engine: AsyncEngine,
    upstream: Upstream,
    settings: Settings,
    *,
    cadnum: str | None,
    point: tuple[float, float] | None,
    refresh: bool = False,
) -> dict[str, Any]:
    """The parcel with this number, else the one at this point, from the configured sources.

    ``MAPSVC_DZK_SOURCE`` names them: the local table (``MAPSVC_PARCELS_TABLE``), the
    ``kadastr`` provider, or the table first and then the provider.

    Args:
        engine: the async engine of the PostGIS database.
        upstream: the provider client.
        settings: the service settings (source, table, provider).
        cadnum: a checked cadastral number; it wins over ``point``.
        point: ``(lng, lat)`` in EPSG:4326.
        refresh: skip the provider's cached answers.

    Returns:
        The parcel, as spec 2.10's ``result``.

    Raises:
        NotFoundError: no source has such a parcel.
        ProviderNotConfiguredError: the table or the provider it needed is not configured.
    """
    source = settings.sources.dzk_source
    found = None
    if source != "kadastr":
        table = settings.sources.parcels_table
        if cadnum is not None:
            found = await parcel_by_cadnum(engine, table, cadnum)
        elif point is not None:
            found = await parcel_at(engine, table, *point)
    if found is None and source != "local":
        remote = provider(settings, "kadastr")
        if cadnum is not None:
            found = await remote_parcel_by_cadnum(upstream, remote, cadnum, refresh=refresh)
        elif point is not None:
            found = await remote_parcel_at(upstream, remote, *point, refresh=refresh)
    if found is None:
        what = f"cadastral number {cadnum}" if cadnum else f"point {point}"
        raise NotFoundError(f"no parcel for {what}", cadnum=cadnum)
    return found
