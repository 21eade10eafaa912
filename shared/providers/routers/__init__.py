"""Routing providers: one class per provider behind :class:`Router`, found by name.

Adding a provider is a module here with a :class:`Router` subclass, listed in :data:`ROUTERS`.
"""

from __future__ import annotations

from shared.providers.config import Provider
from shared.providers.routers.base import RouteQuery, Router
from shared.providers.routers.osrm import Osrm
from shared.providers.routers.valhalla import Valhalla
from shared.providers.upstream import Upstream

__all__ = ["ROUTERS", "RouteQuery", "Router", "router"]

#: the router class of each provider name of the settings
ROUTERS: dict[str, type[Router]] = {cls.name: cls for cls in (Osrm, Valhalla)}


def router(upstream: Upstream, provider: Provider) -> Router:
    """The router of the configured ``provider``, asked through ``upstream``."""
    return ROUTERS[provider.name](upstream, provider)
