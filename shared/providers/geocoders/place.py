"""A place as the keyless providers describe it, and the spec shapes a place is written in."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ADDRESS_PARTS",
    "OSM_ATTRIBUTION",
    "Place",
    "geocode_feature",
    "here_item",
    "mapbox_feature",
]

#: address parts of a place (and of a ``geocode`` feature's ``address``)
ADDRESS_PARTS = (
    "house_number",
    "street",
    "postcode",
    "district",
    "city",
    "county",
    "state",
    "country",
    "country_code",
)
#: attribution of answers made from OpenStreetMap data (Nominatim, Photon)
OSM_ATTRIBUTION = "Data © OpenStreetMap contributors, ODbL 1.0. https://osm.org/copyright"


@dataclass(frozen=True)
class Place:
    """A place as the keyless providers describe it, before it is put into a shape."""

    source_id: str  # the provider's own id, e.g. ``node/123``
    name: str
    label: str
    type: str  # e.g. ``house``, ``street``, ``city``, ``state``, ``country``
    lon: float
    lat: float
    bbox: list[float] | None  # west, south, east, north
    address: dict[str, str] = field(default_factory=dict)


def geocode_feature(place: Place, provider: str) -> dict[str, Any]:
    """A place written as a feature of the ``geocode`` FeatureCollection."""
    return {
        "type": "Feature",
        "id": f"{provider}:{place.source_id}",
        "geometry": {"type": "Point", "coordinates": [place.lon, place.lat]},
        "bbox": place.bbox,
        "properties": {
            "name": place.name,
            "label": place.label,
            "type": place.type,
            "address": {k: place.address.get(k, "") for k in ADDRESS_PARTS},
        },
    }


def _distance_m(lon1: float, lat1: float, lon2: float, lat2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * 6371008.8 * math.asin(math.sqrt(min(1.0, a)))


_HERE_RESULT_TYPES = {
    "house": "houseNumber",
    "building": "houseNumber",
    "road": "street",
    "street": "street",
    "city": "locality",
    "town": "locality",
    "village": "locality",
    "hamlet": "locality",
    "suburb": "locality",
    "district": "locality",
    "postcode": "postalCodePoint",
    "county": "administrativeArea",
    "state": "administrativeArea",
    "country": "administrativeArea",
}


def here_item(place: Place, x: float, y: float) -> dict[str, Any]:
    """A place written as a HERE revgeocode v7 item (spec 2.7 ``geocoder_a``)."""
    a = place.address
    result_type = "houseNumber" if a.get("house_number") else None
    result_type = result_type or _HERE_RESULT_TYPES.get(place.type, "place")
    w, s, e, n = place.bbox or [place.lon, place.lat, place.lon, place.lat]
    return {
        "title": place.label or place.name,  # HERE titles addresses with their full label
        "id": place.source_id,
        "resultType": result_type,
        "houseNumberType": "PA" if a.get("house_number") else "",
        "address": {
            "label": place.label,
            "countryCode": a.get("country_code", ""),
            "countryName": a.get("country", ""),
            "state": a.get("state", ""),
            "countyCode": "",
            "county": a.get("county", ""),
            "city": a.get("city", ""),
            "district": a.get("district", ""),
            "street": a.get("street", ""),
            "postalCode": a.get("postcode", ""),
            "houseNumber": a.get("house_number", ""),
        },
        "position": {"lat": place.lat, "lng": place.lon},
        "access": [],
        "distance": round(_distance_m(x, y, place.lon, place.lat)),
        "mapView": {"west": w, "south": s, "east": e, "north": n},
    }


_MAPBOX_PLACE_TYPES = {
    "house": "address",
    "building": "address",
    "road": "address",
    "street": "address",
    "city": "place",
    "town": "place",
    "village": "place",
    "hamlet": "place",
    "suburb": "neighborhood",
    "district": "locality",
    "postcode": "postcode",
    "county": "district",
    "state": "region",
    "country": "country",
}


def mapbox_feature(place: Place) -> dict[str, Any]:
    """A place written as a Mapbox geocoding v5 feature (spec 2.7 ``map``)."""
    a = place.address
    place_type = "address" if a.get("house_number") else _MAPBOX_PLACE_TYPES.get(place.type, "poi")
    context = [
        {"id": f"{kind}.{place.source_id}", "text": a[part]}
        for kind, part in (
            ("neighborhood", "district"),
            ("postcode", "postcode"),
            ("place", "city"),
            ("district", "county"),
            ("region", "state"),
            ("country", "country"),
        )
        if a.get(part)
    ]
    return {
        "id": f"{place_type}.{place.source_id}",
        "type": "Feature",
        "place_type": [place_type],
        "relevance": 1,
        "properties": {
            "accuracy": "rooftop"
            if a.get("house_number")
            else ("street" if a.get("street") else ""),
            "geocoder_b_id": place.source_id,
        },
        "text": a.get("street") or place.name,
        "place_name": place.label,
        "center": [place.lon, place.lat],
        "geometry": {"type": "Point", "coordinates": [place.lon, place.lat]},
        "address": a.get("house_number", ""),
        "context": context,
    }
