"""The interface of a geocoding provider (as rio-tiler's ``BaseReader`` is of a reader)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.providers.client import ProviderClient
from shared.providers.geocoders.place import Place, here_item, mapbox_feature

__all__ = ["GeocodeQuery", "Geocoder", "PointQuery"]


@dataclass(frozen=True)
class GeocodeQuery:
    """A forward geocoding question: the text, language, most places, an optional box."""

    q: str
    lang: str
    limit: int
    bbox: tuple[float, float, float, float] | None  # west, south, east, north
    refresh: bool = False  # bypass the cache


@dataclass(frozen=True)
class PointQuery:
    """A reverse geocoding question: longitude ``x``, latitude ``y`` (rounded), language."""

    x: float
    y: float
    lang: str
    refresh: bool = False  # bypass the cache


class Geocoder(ProviderClient):
    """A geocoding provider: places by name, places at a point, the spec 2.7 shapes.

    A provider of places (Nominatim, Photon) implements :meth:`geocode` and :meth:`reverse`; the
    spec's two reverse shapes are then written from its places. A provider whose own answer is
    one of those shapes (HERE for ``geocoder_a``, Mapbox for ``map``) overrides that shape's
    method instead. The settings only name a provider for what it can do.
    """

    async def geocode(self, query: GeocodeQuery) -> list[Place]:
        """Places named ``query.q`` (at most ``query.limit``), inside its box if given."""
        raise NotImplementedError(f"provider {self.name} does not geocode")

    async def reverse(self, point: PointQuery) -> list[Place]:
        """The place at the point (none or one)."""
        raise NotImplementedError(f"provider {self.name} does not list places at a point")

    async def here_items(self, point: PointQuery) -> list[dict[str, Any]]:
        """The place at the point as HERE revgeocode v7 items (spec 2.7 ``geocoder_a``)."""
        return [here_item(p, point.x, point.y) for p in await self.reverse(point)]

    async def mapbox_features(self, point: PointQuery) -> tuple[list[dict[str, Any]], str]:
        """The place at the point as Mapbox v5 features (spec 2.7 ``map``), and attribution."""
        return [mapbox_feature(p) for p in await self.reverse(point)], self.attribution
