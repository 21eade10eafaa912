"""Geocoding: forward (``geocode``) and reverse (spec 2.7) from Nominatim, Photon, HERE, Mapbox.

Answers of the keyless providers (Nominatim ``jsonv2``, Photon GeoJSON) are first read into a
:class:`Place`; a place is then written in the shape each key asks for: a GeoJSON feature of
``geocode``, a HERE revgeocode v7 item (``geocoder_a``), a Mapbox v5 feature (``map``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from shared.errors import NotFoundError, UpstreamBadAnswerError
from shared.providers.config import Provider
from shared.providers.upstream import Upstream, round_coord

__all__ = [
    "GEOCODE_ATTRIBUTION",
    "Place",
    "forward_geocode",
    "here_item",
    "mapbox_feature",
    "reverse_geocoder_a",
    "reverse_map",
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
GEOCODE_ATTRIBUTION = {
    "nominatim": "Data © OpenStreetMap contributors, ODbL 1.0. https://osm.org/copyright",
    "photon": "Data © OpenStreetMap contributors, ODbL 1.0. https://osm.org/copyright",
}
_HERE_ADDRESS = (
    "label",
    "countryCode",
    "countryName",
    "state",
    "countyCode",
    "county",
    "city",
    "district",
    "street",
    "postalCode",
    "houseNumber",
)


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


def _num(value: Any, what: str, provider: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UpstreamBadAnswerError(
            f"provider {provider}: {what} is not a number", provider=provider
        ) from None
    if not math.isfinite(number):
        raise UpstreamBadAnswerError(
            f"provider {provider}: {what} is not finite", provider=provider
        )
    return number


def _str(value: Any) -> str:
    return "" if value is None else str(value)


_NOMINATIM_CITY = ("city", "town", "village", "hamlet", "municipality")
_NOMINATIM_DISTRICT = ("city_district", "suburb", "borough", "neighbourhood", "quarter")
_NOMINATIM_STREET = ("road", "pedestrian", "footway", "path", "square", "place")


def place_from_nominatim(item: Any) -> Place:
    """A Nominatim ``jsonv2`` result (``/search`` element or ``/reverse`` answer)."""
    if not isinstance(item, dict):
        raise UpstreamBadAnswerError("provider nominatim: a result is not an object")
    raw = item.get("address") or {}
    if not isinstance(raw, dict):
        raw = {}

    def first(names: tuple[str, ...]) -> str:
        return next((_str(raw[n]) for n in names if raw.get(n)), "")

    address = {
        "house_number": _str(raw.get("house_number")),
        "street": first(_NOMINATIM_STREET),
        "postcode": _str(raw.get("postcode")),
        "district": first(_NOMINATIM_DISTRICT),
        "city": first(_NOMINATIM_CITY),
        "county": _str(raw.get("county")),
        "state": _str(raw.get("state")),
        "country": _str(raw.get("country")),
        "country_code": _str(raw.get("country_code")).upper(),
    }
    bbox = None
    box = item.get("boundingbox")
    if isinstance(box, list) and len(box) == 4:  # south, north, west, east (strings)
        s, n, w, e = (_num(v, "boundingbox", "nominatim") for v in box)
        bbox = [w, s, e, n]
    label = _str(item.get("display_name"))
    kind = _str(item.get("addresstype") or item.get("type"))
    return Place(
        source_id=f"{_str(item.get('osm_type'))}/{_str(item.get('osm_id'))}",
        name=_str(item.get("name"))
        or " ".join(p for p in (address["street"], address["house_number"]) if p)
        or label.split(",")[0].strip(),
        label=label,
        type=kind,
        lon=_num(item.get("lon"), "lon", "nominatim"),
        lat=_num(item.get("lat"), "lat", "nominatim"),
        bbox=bbox,
        address=address,
    )


_PHOTON_TYPES = {"N": "node", "W": "way", "R": "relation"}


def place_from_photon(feature: Any) -> Place:
    """A Photon GeoJSON feature (``/api`` or ``/reverse``)."""
    try:
        props = feature["properties"]
        lon, lat = feature["geometry"]["coordinates"][:2]
    except (KeyError, TypeError, ValueError):
        raise UpstreamBadAnswerError("provider photon: a feature has no point") from None
    if not isinstance(props, dict):
        raise UpstreamBadAnswerError("provider photon: a feature has no properties")
    address = {
        "house_number": _str(props.get("housenumber")),
        "street": _str(props.get("street")),
        "postcode": _str(props.get("postcode")),
        "district": _str(props.get("district") or props.get("locality")),
        "city": _str(props.get("city")),
        "county": _str(props.get("county")),
        "state": _str(props.get("state")),
        "country": _str(props.get("country")),
        "country_code": _str(props.get("countrycode")).upper(),
    }
    name = _str(props.get("name"))
    street = " ".join(p for p in (address["street"], address["house_number"]) if p)
    parts = [name, street, " ".join(p for p in (address["postcode"], address["city"]) if p)]
    parts += [address["state"], address["country"]]
    label = ", ".join(dict.fromkeys(p for p in parts if p))
    bbox = None
    extent = props.get("extent")
    if isinstance(extent, list) and len(extent) == 4:  # west, north, east, south
        w, n, e, s = (_num(v, "extent", "photon") for v in extent)
        bbox = [w, s, e, n]
    osm_type = _PHOTON_TYPES.get(_str(props.get("osm_type")), _str(props.get("osm_type")))
    return Place(
        source_id=f"{osm_type}/{_str(props.get('osm_id'))}",
        name=name or street or label.split(",")[0],
        label=label,
        type=_str(props.get("type") or props.get("osm_value")),
        lon=_num(lon, "longitude", "photon"),
        lat=_num(lat, "latitude", "photon"),
        bbox=bbox,
        address=address,
    )


async def _places(
    upstream: Upstream,
    provider: Provider,
    path: str,
    params: dict[str, Any],
    *,
    refresh: bool,
) -> list[Place]:
    if provider.name == "nominatim":
        query = {"format": "jsonv2", "addressdetails": 1, **params}
        body = await upstream.get_json(provider, path, query, refresh=refresh)
        if isinstance(body, dict) and "error" in body:  # /reverse: {"error": "Unable to geocode"}
            return []
        items = body if isinstance(body, list) else [body]
        return [place_from_nominatim(item) for item in items]
    body = await upstream.get_json(provider, path, params, refresh=refresh)
    if not isinstance(body, dict) or not isinstance(body.get("features"), list):
        raise UpstreamBadAnswerError(
            "provider photon: the answer is not a FeatureCollection", provider="photon"
        )
    return [place_from_photon(f) for f in body["features"]]


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
        provider: a Nominatim- or Photon-compatible provider.
        q: the text to look for.
        lang: preferred language of names.
        limit: most places answered.
        bbox: only places inside ``west, south, east, north``.
        refresh: bypass the cache.

    Returns:
        The FeatureCollection.
    """
    if provider.name == "nominatim":
        params: dict[str, Any] = {"q": q, "limit": limit, "accept-language": lang}
        if bbox:
            w, s, e, n = bbox
            params.update(viewbox=f"{w},{n},{e},{s}", bounded=1)
        places = await _places(upstream, provider, "search", params, refresh=refresh)
    else:
        params = {"q": q, "limit": limit, "lang": lang}
        if bbox:
            params["bbox"] = ",".join(str(v) for v in bbox)
        places = await _places(upstream, provider, "api", params, refresh=refresh)
    return {
        "type": "FeatureCollection",
        "query": {"q": q, "lang": lang, "limit": limit, "bbox": list(bbox) if bbox else None},
        "features": [_geocode_feature(p, provider.name) for p in places[:limit]],
        "attribution": GEOCODE_ATTRIBUTION[provider.name],
    }


def _geocode_feature(place: Place, provider: str) -> dict[str, Any]:
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


def _here_native(item: Any) -> dict[str, Any]:
    """A HERE item reduced to the fields of spec 2.7 (missing strings are ``""``)."""
    if not isinstance(item, dict) or not isinstance(item.get("position"), dict):
        raise UpstreamBadAnswerError("provider here: an item has no position", provider="here")
    raw = item.get("address") if isinstance(item.get("address"), dict) else {}
    assert isinstance(raw, dict)
    pos = item["position"]
    view = item.get("mapView") if isinstance(item.get("mapView"), dict) else None
    access = item.get("access") if isinstance(item.get("access"), list) else []
    assert isinstance(access, list)
    return {
        "title": _str(item.get("title")),
        "id": _str(item.get("id")),
        "resultType": _str(item.get("resultType")),
        "houseNumberType": _str(item.get("houseNumberType")),
        "address": {k: _str(raw.get(k)) for k in _HERE_ADDRESS},
        "position": {
            "lat": _num(pos.get("lat"), "lat", "here"),
            "lng": _num(pos.get("lng"), "lng", "here"),
        },
        "access": [
            {"lat": _num(p.get("lat"), "lat", "here"), "lng": _num(p.get("lng"), "lng", "here")}
            for p in access
            if isinstance(p, dict)
        ],
        "distance": _num(item.get("distance", 0), "distance", "here"),
        "mapView": (
            {k: _num(view.get(k), k, "here") for k in ("west", "south", "east", "north")}
            if view
            else None
        ),
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
    x, y = round_coord(x), round_coord(y)
    if provider.name == "here":
        params = {"at": f"{y},{x}", "lang": lang, "limit": 1}
        try:
            body = await upstream.get_json(
                provider,
                "v1/revgeocode",
                params,
                secret_params={"apiKey": provider.secret()},
                refresh=refresh,
            )
        except NotFoundError:  # HERE's 4xx for a point it cannot place
            return {"items": []}
        if not isinstance(body, dict) or not isinstance(body.get("items"), list):
            raise UpstreamBadAnswerError("provider here: the answer has no items", provider="here")
        return {"items": [_here_native(i) for i in body["items"]]}
    places = await _reverse_places(upstream, provider, x, y, lang=lang, refresh=refresh)
    return {"items": [here_item(p, x, y) for p in places]}


async def _reverse_places(
    upstream: Upstream, provider: Provider, x: float, y: float, *, lang: str, refresh: bool
) -> list[Place]:
    if provider.name == "nominatim":
        params: dict[str, Any] = {"lat": y, "lon": x, "accept-language": lang}
    else:
        params = {"lat": y, "lon": x, "lang": lang, "limit": 1}
    try:
        return await _places(upstream, provider, "reverse", params, refresh=refresh)
    except NotFoundError:  # the provider's own 4xx for "nothing here"
        return []


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


def _mapbox_native(feature: Any) -> dict[str, Any]:
    """A Mapbox v5 feature reduced to the fields of spec 2.7 (``mapbox_id`` → ``geocoder_b_id``)."""
    if not isinstance(feature, dict):
        raise UpstreamBadAnswerError(
            "provider mapbox: a feature is not an object", provider="mapbox"
        )
    props = feature.get("properties") if isinstance(feature.get("properties"), dict) else {}
    assert isinstance(props, dict)
    center = feature.get("center")
    if not isinstance(center, list) or len(center) != 2:
        raise UpstreamBadAnswerError("provider mapbox: a feature has no center", provider="mapbox")
    lon, lat = (_num(v, "center", "mapbox") for v in center)
    context = feature.get("context") if isinstance(feature.get("context"), list) else []
    assert isinstance(context, list)
    return {
        "id": _str(feature.get("id")),
        "type": "Feature",
        "place_type": [_str(t) for t in feature.get("place_type") or []],
        "relevance": _num(feature.get("relevance", 1), "relevance", "mapbox"),
        "properties": {
            "accuracy": _str(props.get("accuracy")),
            "geocoder_b_id": _str(props.get("mapbox_id") or feature.get("id")),
        },
        "text": _str(feature.get("text")),
        "place_name": _str(feature.get("place_name")),
        "center": [lon, lat],
        "geometry": {"type": "Point", "coordinates": [lon, lat]},
        "address": _str(feature.get("address")),
        "context": [
            {"id": _str(c.get("id")), "text": _str(c.get("text"))}
            for c in context
            if isinstance(c, dict)
        ],
    }


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
    x, y = round_coord(x), round_coord(y)
    if provider.name == "mapbox":
        try:
            body = await upstream.get_json(
                provider,
                f"geocoding/v5/mapbox.places/{x},{y}.json",
                {"language": lang},
                secret_params={"access_token": provider.secret()},
                refresh=refresh,
            )
        except NotFoundError:
            body = {"features": [], "attribution": ""}
        if not isinstance(body, dict) or not isinstance(body.get("features"), list):
            raise UpstreamBadAnswerError(
                "provider mapbox: the answer is not a FeatureCollection", provider="mapbox"
            )
        features = [_mapbox_native(f) for f in body["features"]]
        attribution = _str(body.get("attribution"))
    else:
        places = await _reverse_places(upstream, provider, x, y, lang=lang, refresh=refresh)
        features = [mapbox_feature(p) for p in places]
        attribution = GEOCODE_ATTRIBUTION[provider.name]
    return {
        "type": "FeatureCollection",
        "query": [x, y],
        "features": features,
        "attribution": attribution,
    }
