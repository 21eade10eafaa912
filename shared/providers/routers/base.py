"""The interface of a routing provider (as rio-tiler's ``BaseReader`` is of a reader)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from shared.providers.client import ProviderClient

__all__ = ["RouteQuery", "Router"]


@dataclass(frozen=True)
class RouteQuery:
    """A routing question: the points, the profile, whether to add steps and alternatives."""

    points: tuple[tuple[float, float], ...]  # (lon, lat), at least two
    profile: str  # ``car``, ``bike`` or ``foot``
    steps: bool  # turn-by-turn steps
    alternatives: bool  # alternative routes in ``properties.alternatives``
    refresh: bool = False  # bypass the cache


class Router(ProviderClient, ABC):
    """A routing provider: the route through points as the ``map-route`` GeoJSON Feature."""

    @abstractmethod
    async def route(self, query: RouteQuery) -> dict[str, Any]:
        """The route through the query's points (docs/api/providers.md "map-route").

        Returns:
            The Feature (LineString) with ``distance`` (m), ``duration`` (s), ``steps``,
            ``waypoints`` and ``attribution``.

        Raises:
            NotFoundError: the provider finds no route between the points.
        """
