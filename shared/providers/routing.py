"""Routing (``map-route``) from the configured provider, as a GeoJSON Feature.

Each provider is a class of :mod:`shared.providers.routers` (OSRM, Valhalla), picked by name.
"""

from __future__ import annotations

from typing import Any

from shared.providers.config import Provider
from shared.providers.routers import RouteQuery, router
from shared.providers.upstream import Upstream

__all__ = ["MAX_ROUTE_POINTS", "PROFILES", "RouteQuery", "route"]

#: most points of one route
MAX_ROUTE_POINTS = 25

#: the profiles of the API; OSRM's own profiles have the same names
PROFILES = ("car", "bike", "foot")


async def route(upstream: Upstream, provider: Provider, query: RouteQuery) -> dict[str, Any]:
    """The route through ``query.points`` from ``provider`` (OSRM or Valhalla) as a GeoJSON
    Feature (docs/api/providers.md, "map-route"): a LineString with ``distance`` (m),
    ``duration`` (s) and ``steps``, and the alternatives in ``properties.alternatives`` when asked.

    Raises:
        NotFoundError: the provider finds no route between the points.
    """
    return await router(upstream, provider).route(query)
