"""Routing (``map-route``) from the configured provider, as a GeoJSON Feature.

Each provider is a class of :mod:`shared.providers.routers` (OSRM, Valhalla), picked by name.
"""

from __future__ import annotations

from typing import Any

from shared.providers.config import Provider
from shared.providers.routers import RouteQuery, router
from shared.providers.upstream import Upstream

__all__ = ["MAX_ROUTE_POINTS", "PROFILES", "route"]

#: most points of one route
MAX_ROUTE_POINTS = 25

#: the profiles of the API; OSRM's own profiles have the same names
PROFILES = ("car", "bike", "foot")


async def route(
    upstream: Upstream,
    provider: Provider,
    points: list[tuple[float, float]],
    *,
    profile: str,
    steps: bool,
    alternatives: bool,
    refresh: bool = False,
) -> dict[str, Any]:
    """The route through ``points`` as a GeoJSON Feature (README "map-route").

    Args:
        upstream: the provider client.
        provider: an OSRM- or Valhalla-compatible provider.
        points: ``(lon, lat)`` pairs, at least two.
        profile: ``car``, ``bike`` or ``foot``.
        steps: include turn-by-turn steps.
        alternatives: include alternative routes in ``properties.alternatives``.
        refresh: bypass the cache.

    Returns:
        The Feature (LineString) with ``distance`` (m), ``duration`` (s) and ``steps``.

    Raises:
        NotFoundError: the provider finds no route between the points.
    """
    query = RouteQuery(tuple(points), profile, steps, alternatives, refresh)
    return await router(upstream, provider).route(query)
