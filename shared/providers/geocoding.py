"""Geocoding: forward (``geocode``) and reverse (spec 2.7) from the configured providers.

Each provider is a class of :mod:`shared.providers.geocoders`; these functions pick it by name
and put its answer into the envelope the API gives: the ``geocode`` FeatureCollection, the
``geocoder_a`` object (HERE revgeocode v7 items), the ``map`` FeatureCollection (Mapbox v5).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from shared.providers.config import Provider
from shared.providers.geocoders import GeocodeQuery, PointQuery, geocoder
from shared.providers.geocoders.place import geocode_feature
from shared.providers.upstream import Upstream, round_coord

__all__ = ["ReverseGeocode", "forward_geocode", "reverse_geocoder_a", "reverse_map"]


class ReverseGeocode(Protocol):
    """Either key of a spec 2.7 answer (`reverse_geocoder_a`, `reverse_map`) for a point."""

    def __call__(
        self,
        upstream: Upstream,
        provider: Provider,
        x: float,
        y: float,
        *,
        lang: str,
        refresh: bool = False,
    ) -> Awaitable[dict[str, Any]]:
        """The answer for the point ``x, y`` (degrees) from ``provider``."""


async def forward_geocode(
    upstream: Upstream, provider: Provider, query: GeocodeQuery
) -> dict[str, Any]:
    """Places named ``query.q`` from ``provider`` (Nominatim or Photon), as a GeoJSON
    FeatureCollection (docs/api/providers.md "geocode")."""
    source = geocoder(upstream, provider)
    places = await source.geocode(query)
    q, bbox = query, query.bbox
    return {
        "type": "FeatureCollection",
        "query": {"q": q.q, "lang": q.lang, "limit": q.limit, "bbox": list(bbox) if bbox else None},
        "features": [geocode_feature(p, provider.name) for p in places[: q.limit]],
        "attribution": source.attribution,
    }


async def reverse_geocoder_a(
    upstream: Upstream, provider: Provider, x: float, y: float, *, lang: str, refresh: bool = False
) -> dict[str, Any]:
    """Spec 2.7 ``geocoder_a`` of the point ``x, y`` (degrees): ``{"items": [...]}``, HERE
    revgeocode v7 items from HERE (native), Nominatim or Photon (mapped)."""
    point = PointQuery(round_coord(x), round_coord(y), lang, refresh)
    return {"items": await geocoder(upstream, provider).here_items(point)}


async def reverse_map(
    upstream: Upstream, provider: Provider, x: float, y: float, *, lang: str, refresh: bool = False
) -> dict[str, Any]:
    """Spec 2.7 ``map`` of the point ``x, y`` (degrees): a FeatureCollection in the Mapbox
    geocoding v5 shape, from Mapbox (native), Nominatim or Photon (mapped)."""
    point = PointQuery(round_coord(x), round_coord(y), lang, refresh)
    features, attribution = await geocoder(upstream, provider).mapbox_features(point)
    return {
        "type": "FeatureCollection",
        "query": [point.x, point.y],
        "features": features,
        "attribution": attribution,
    }
