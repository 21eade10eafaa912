"""Geocoding: forward (``geocode``) and reverse (spec 2.7) from the configured providers.

Each provider is a class of :mod:`shared.providers.geocoders`; these functions pick it by name
and put its answer into the envelope the API gives: the ``geocode`` FeatureCollection, the
``geocoder_a`` object (HERE revgeocode v7 items), the ``map`` FeatureCollection (Mapbox v5).
"""

from __future__ import annotations

from typing import Any

from shared.providers.config import Provider
from shared.providers.geocoders import GeocodeQuery, PointQuery, geocoder
from shared.providers.geocoders.place import geocode_feature
from shared.providers.upstream import Upstream, round_coord

__all__ = ["forward_geocode", "reverse_geocoder_a", "reverse_map"]


async def forward_geocode(
    upstream: Upstream,
    provider: Provider,
    q: str,
    *,
    lang: str,
    limit: int,
    bbox: tuple[float, float, float, float] | None,
    refresh: bool = False,
) -> dict[str, Any]:
    """Places named ``q``, as a GeoJSON FeatureCollection (README "geocode").

    Args:
        upstream: the provider client.
        provider: a provider of places (Nominatim or Photon).
        q: the text to look for.
        lang: preferred language of names.
        limit: most places answered.
        bbox: only places inside ``west, south, east, north``.
        refresh: bypass the cache.

    Returns:
        The FeatureCollection.
    """
    source = geocoder(upstream, provider)
    places = await source.geocode(GeocodeQuery(q, lang, limit, bbox, refresh))
    return {
        "type": "FeatureCollection",
        "query": {"q": q, "lang": lang, "limit": limit, "bbox": list(bbox) if bbox else None},
        "features": [geocode_feature(p, provider.name) for p in places[:limit]],
        "attribution": source.attribution,
    }


async def reverse_geocoder_a(
    upstream: Upstream, provider: Provider, x: float, y: float, *, lang: str, refresh: bool = False
) -> dict[str, Any]:
    """Spec 2.7 ``geocoder_a``: ``{"items": [...]}`` in the HERE revgeocode v7 shape.

    Args:
        upstream: the provider client.
        provider: HERE (native), Nominatim or Photon (mapped).
        x: longitude.
        y: latitude.
        lang: preferred language.
        refresh: bypass the cache.

    Returns:
        The ``geocoder_a`` object.
    """
    point = PointQuery(round_coord(x), round_coord(y), lang, refresh)
    return {"items": await geocoder(upstream, provider).here_items(point)}


async def reverse_map(
    upstream: Upstream, provider: Provider, x: float, y: float, *, lang: str, refresh: bool = False
) -> dict[str, Any]:
    """Spec 2.7 ``map``: a FeatureCollection in the Mapbox geocoding v5 shape.

    Args:
        upstream: the provider client.
        provider: Mapbox (native), Nominatim or Photon (mapped).
        x: longitude.
        y: latitude.
        lang: preferred language.
        refresh: bypass the cache.

    Returns:
        The ``map`` object.
    """
    point = PointQuery(round_coord(x), round_coord(y), lang, refresh)
    features, attribution = await geocoder(upstream, provider).mapbox_features(point)
    return {
        "type": "FeatureCollection",
        "query": [point.x, point.y],
        "features": features,
        "attribution": attribution,
    }
