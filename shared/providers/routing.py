"""Routing (``map-route``) from an OSRM- or Valhalla-compatible provider, as a GeoJSON Feature."""

from __future__ import annotations

import json
from typing import Any

from shared.errors import NotFoundError, UpstreamBadAnswerError
from shared.providers.config import Provider
from shared.providers.upstream import Upstream, round_coord

__all__ = ["MAX_ROUTE_POINTS", "PROFILES", "decode_polyline6", "route", "valhalla_route"]

#: most points of one route
MAX_ROUTE_POINTS = 25

#: the profiles of the API; OSRM's own profiles have the same names
PROFILES = ("car", "bike", "foot")
ATTRIBUTION = "Routing © OSRM, data © OpenStreetMap contributors, ODbL 1.0"
VALHALLA_ATTRIBUTION = "Routing © Valhalla, data © OpenStreetMap contributors, ODbL 1.0"
_VALHALLA_COSTING = {"car": "auto", "bike": "bicycle", "foot": "pedestrian"}
# Valhalla's maneuver type numbers as OSRM-style (type, modifier)
_VALHALLA_MANEUVERS = {
    1: ("depart", ""),
    2: ("depart", "right"),
    3: ("depart", "left"),
    4: ("arrive", ""),
    5: ("arrive", "right"),
    6: ("arrive", "left"),
    7: ("new name", "straight"),
    8: ("continue", "straight"),
    9: ("turn", "slight right"),
    10: ("turn", "right"),
    11: ("turn", "sharp right"),
    12: ("turn", "uturn"),
    13: ("turn", "uturn"),
    14: ("turn", "sharp left"),
    15: ("turn", "left"),
    16: ("turn", "slight left"),
    26: ("roundabout", ""),
    27: ("exit roundabout", ""),
}


def _bad(message: str) -> UpstreamBadAnswerError:
    return UpstreamBadAnswerError(f"provider osrm: {message}", provider="osrm")


def _step(step: Any) -> dict[str, Any]:
    if not isinstance(step, dict) or not isinstance(step.get("maneuver"), dict):
        raise _bad("a step has no maneuver")
    m = step["maneuver"]
    return {
        "distance": float(step.get("distance", 0)),
        "duration": float(step.get("duration", 0)),
        "name": str(step.get("name", "")),
        "mode": str(step.get("mode", "")),
        "maneuver": {
            "type": str(m.get("type", "")),
            "modifier": str(m.get("modifier", "")),
            "location": m.get("location"),
            "bearing_after": m.get("bearing_after"),
        },
        "geometry": step.get("geometry"),
    }


def _feature(r: Any, profile: str) -> dict[str, Any]:
    if not isinstance(r, dict) or not isinstance(r.get("geometry"), dict):
        raise _bad("a route has no geometry")
    geometry = r["geometry"]
    if geometry.get("type") != "LineString" or not isinstance(geometry.get("coordinates"), list):
        raise _bad("a route's geometry is not a GeoJSON LineString")
    try:
        distance, duration = float(r["distance"]), float(r["duration"])
    except (KeyError, TypeError, ValueError):
        raise _bad("a route has no distance or duration") from None
    legs = r.get("legs") if isinstance(r.get("legs"), list) else []
    assert isinstance(legs, list)
    return {
        "type": "Feature",
        "geometry": {"type": "LineString", "coordinates": geometry["coordinates"]},
        "properties": {
            "profile": profile,
            "distance": distance,
            "duration": duration,
            "steps": [
                _step(s) for leg in legs if isinstance(leg, dict) for s in leg.get("steps") or []
            ],
        },
    }


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
        provider: an OSRM-compatible provider.
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
    coords = ";".join(f"{round_coord(x)},{round_coord(y)}" for x, y in points)
    params = {
        "overview": "full",
        "geometries": "geojson",
        "steps": str(steps).lower(),
        "alternatives": str(alternatives).lower(),
    }
    body = await upstream.get_json(
        provider, f"route/v1/{profile}/{coords}", params, refresh=refresh
    )
    if not isinstance(body, dict) or not isinstance(body.get("code"), str):
        raise _bad("the answer has no code")
    if body["code"] != "Ok" or not body.get("routes"):
        raise NotFoundError(
            f"no route between the points ({body['code']})", provider="osrm", code=body["code"]
        )
    routes = body["routes"]
    if not isinstance(routes, list):
        raise _bad("routes is not a list")
    feature = _feature(routes[0], profile)
    waypoints = body.get("waypoints") if isinstance(body.get("waypoints"), list) else []
    assert isinstance(waypoints, list)
    feature["properties"]["waypoints"] = [
        {
            "name": str(w.get("name", "")),
            "location": w.get("location"),
            "distance": w.get("distance"),
        }
        for w in waypoints
        if isinstance(w, dict)
    ]
    if alternatives:
        feature["properties"]["alternatives"] = [_feature(r, profile) for r in routes[1:]]
    feature["properties"]["attribution"] = ATTRIBUTION
    return feature


def decode_polyline6(encoded: str) -> list[list[float]]:
    """Points ``[lon, lat]`` of a polyline encoded with 6 decimals (Valhalla's ``shape``)."""
    points: list[list[float]] = []
    index = lat = lon = 0
    while index < len(encoded):
        deltas = []
        for _ in range(2):
            shift = result = 0
            while True:
                if index >= len(encoded):
                    raise _bad("a shape is truncated")
                byte = ord(encoded[index]) - 63
                index += 1
                result |= (byte & 0x1F) << shift
                shift += 5
                if byte < 0x20:
                    break
            deltas.append(~(result >> 1) if result & 1 else result >> 1)
        lat += deltas[0]
        lon += deltas[1]
        points.append([lon / 1e6, lat / 1e6])
    return points


def _valhalla_feature(trip: Any, profile: str) -> dict[str, Any]:
    if not isinstance(trip, dict) or not isinstance(trip.get("legs"), list):
        raise UpstreamBadAnswerError("provider valhalla: a trip has no legs", provider="valhalla")
    coordinates: list[list[float]] = []
    steps = []
    for leg in trip["legs"]:
        if not isinstance(leg, dict) or not isinstance(leg.get("shape"), str):
            raise UpstreamBadAnswerError(
                "provider valhalla: a leg has no shape", provider="valhalla"
            )
        shape = decode_polyline6(leg["shape"])
        coordinates.extend(shape[1:] if coordinates and shape else shape)
        for m in leg.get("maneuvers") or []:
            if not isinstance(m, dict):
                continue
            kind, modifier = _VALHALLA_MANEUVERS.get(int(m.get("type", 0)), ("continue", ""))
            begin = int(m.get("begin_shape_index", 0))
            end = int(m.get("end_shape_index", begin))
            names = m.get("street_names") or []
            steps.append(
                {
                    "distance": float(m.get("length", 0)) * 1000,
                    "duration": float(m.get("time", 0)),
                    "name": "; ".join(str(n) for n in names),
                    "mode": str(m.get("travel_mode", "")),
                    "maneuver": {
                        "type": kind,
                        "modifier": modifier,
                        "location": shape[begin] if begin < len(shape) else None,
                        "bearing_after": m.get("bearing_after"),
                    },
                    "geometry": {"type": "LineString", "coordinates": shape[begin : end + 1]},
                }
            )
    summary = trip.get("summary")
    if not isinstance(summary, dict) or len(coordinates) < 2:
        raise UpstreamBadAnswerError(
            "provider valhalla: a trip has no summary", provider="valhalla"
        )
    return {
        "type": "Feature",
        "geometry": {"type": "LineString", "coordinates": coordinates},
        "properties": {
            "profile": profile,
            "distance": float(summary.get("length", 0)) * 1000,  # asked in kilometres
            "duration": float(summary.get("time", 0)),
            "steps": steps,
        },
    }


async def valhalla_route(
    upstream: Upstream,
    provider: Provider,
    points: list[tuple[float, float]],
    *,
    profile: str,
    steps: bool,
    alternatives: bool,
    refresh: bool = False,
) -> dict[str, Any]:
    """The route through ``points`` from Valhalla, in the same Feature as :func:`route`.

    Args:
        upstream: the provider client.
        provider: a Valhalla-compatible provider (``GET /route?json=…``).
        points: ``(lon, lat)`` pairs, at least two.
        profile: ``car``, ``bike`` or ``foot`` (costing ``auto``, ``bicycle``, ``pedestrian``).
        steps: include turn-by-turn steps.
        alternatives: include alternative routes in ``properties.alternatives``.
        refresh: bypass the cache.

    Returns:
        The Feature (LineString) with ``distance`` (m), ``duration`` (s) and ``steps``.

    Raises:
        NotFoundError: the provider finds no route between the points (its 400).
    """
    request = {
        "locations": [{"lon": round_coord(x), "lat": round_coord(y)} for x, y in points],
        "costing": _VALHALLA_COSTING[profile],
        "directions_options": {"units": "kilometers"},
        "alternates": 2 if alternatives else 0,
    }
    params = {"json": json.dumps(request, sort_keys=True, separators=(",", ":"))}
    body = await upstream.get_json(provider, "route", params, refresh=refresh)
    if not isinstance(body, dict) or not isinstance(body.get("trip"), dict):
        raise UpstreamBadAnswerError(
            "provider valhalla: the answer has no trip", provider="valhalla"
        )
    trip = body["trip"]
    feature = _valhalla_feature(trip, profile)
    if not steps:
        feature["properties"]["steps"] = []
    locations = trip.get("locations") if isinstance(trip.get("locations"), list) else []
    assert isinstance(locations, list)
    feature["properties"]["waypoints"] = [
        {
            "name": str(loc.get("name", "")),
            "location": [loc.get("lon"), loc.get("lat")],
            "distance": None,
        }
        for loc in locations
        if isinstance(loc, dict)
    ]
    if alternatives:
        alternates = body.get("alternates") if isinstance(body.get("alternates"), list) else []
        assert isinstance(alternates, list)
        feature["properties"]["alternatives"] = [
            _valhalla_feature(a.get("trip") if isinstance(a, dict) else None, profile)
            for a in alternates
        ]
        if not steps:
            for alt in feature["properties"]["alternatives"]:
                alt["properties"]["steps"] = []
    feature["properties"]["attribution"] = VALHALLA_ATTRIBUTION
    return feature
