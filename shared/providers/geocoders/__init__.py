"""Geocoding providers: one class per provider behind :class:`Geocoder`, found by name.

Adding a provider is a module here with a :class:`Geocoder` subclass, listed in
:data:`GEOCODERS`.
"""

from __future__ import annotations

from shared.providers.config import Provider
from shared.providers.geocoders.base import GeocodeQuery, Geocoder, PointQuery
from shared.providers.geocoders.here import Here
from shared.providers.geocoders.mapbox import Mapbox
from shared.providers.geocoders.nominatim import Nominatim
from shared.providers.geocoders.photon import Photon
from shared.providers.upstream import Upstream

__all__ = ["GEOCODERS", "GeocodeQuery", "Geocoder", "PointQuery", "geocoder"]

#: the geocoder class of each provider name of the settings
GEOCODERS: dict[str, type[Geocoder]] = {cls.name: cls for cls in (Nominatim, Photon, Here, Mapbox)}


def geocoder(upstream: Upstream, provider: Provider) -> Geocoder:
    """The geocoder of the configured ``provider``, asked through ``upstream``."""
    return GEOCODERS[provider.name](upstream, provider)
