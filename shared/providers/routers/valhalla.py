"""Valhalla (``GET /route?json=…``): the route, its shape and maneuvers put in OSRM's terms."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BeforeValidator

from shared.providers._answers import Answer, DictList, ListOrEmpty, Num, Text
from shared.providers.routers.base import RouteQuery, Router
from shared.providers.upstream import round_coord

__all__ = ["Valhalla", "decode_polyline6"]

_COSTING = {"car": "auto", "bike": "bicycle", "foot": "pedestrian"}
# Valhalla's maneuver type numbers as OSRM-style (type, modifier)
_MANEUVERS = {
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


def decode_polyline6(encoded: str) -> list[list[float]]:
    """Points ``[lon, lat]`` of a polyline encoded with 6 decimals (Valhalla's ``shape``).

    Raises:
        ValueError: the polyline is truncated.
    """
    points: list[list[float]] = []
    index = lat = lon = 0
    while index < len(encoded):
        deltas = []
        for _ in range(2):
            shift = result = 0
            while True:
                if index >= len(encoded):
                    raise ValueError("a shape is truncated")
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


class ValhallaManeuver(Answer):
    """One maneuver of a leg; its shape indexes point into the leg's shape."""

    type: int = 0
    begin_shape_index: int = 0
    end_shape_index: int | None = None
    length: Num = 0.0  # kilometres (asked so)
    time: Num = 0.0
    street_names: Annotated[list[Text], BeforeValidator(lambda v: v or [])] = []
    travel_mode: Text = ""
    bearing_after: Any = None


class ValhallaLeg(Answer):
    """A leg between two locations: its shape (polyline6) and maneuvers."""

    shape: str
    maneuvers: Annotated[list[ValhallaManeuver], DictList] = []


class ValhallaSummary(Answer):
    """A trip's length (kilometres) and time (seconds)."""

    length: Num = 0.0
    time: Num = 0.0


class ValhallaLocation(Answer):
    """A location of the trip."""

    name: Text = ""
    lon: Any = None
    lat: Any = None


class ValhallaTrip(Answer):
    """A trip: legs, summary, locations."""

    legs: list[ValhallaLeg]
    summary: ValhallaSummary
    locations: Annotated[list[ValhallaLocation], DictList] = []


class ValhallaAlternate(Answer):
    """An alternative route."""

    trip: ValhallaTrip


class ValhallaAnswer(Answer):
    """A ``/route`` answer: the trip and the alternates (each read when asked for)."""

    trip: ValhallaTrip
    alternates: Annotated[list[Any], ListOrEmpty] = []


class Valhalla(Router):
    """A Valhalla server (``MAPSVC_VALHALLA_URL``); profiles are costings."""

    name = "valhalla"
    attribution = "Routing © Valhalla, data © OpenStreetMap contributors, ODbL 1.0"

    async def route(self, query: RouteQuery) -> dict[str, Any]:
        """The route from ``/route`` (see :meth:`Router.route`).

        The profiles ``car``, ``bike``, ``foot`` are the costings ``auto``, ``bicycle``,
        ``pedestrian``; Valhalla's 400 for "no path" is the ``NotFoundError``.
        """
        request = {
            "locations": [{"lon": round_coord(x), "lat": round_coord(y)} for x, y in query.points],
            "costing": _COSTING[query.profile],
            "directions_options": {"units": "kilometers"},
            "alternates": 2 if query.alternatives else 0,
        }
        params = {"json": json.dumps(request, sort_keys=True, separators=(",", ":"))}
        body = await self.get_json("route", params, refresh=query.refresh)
        answer = self.parse(ValhallaAnswer, body)
        feature = self._feature(answer.trip, query)
        feature["properties"]["waypoints"] = [
            {"name": loc.name, "location": [loc.lon, loc.lat], "distance": None}
            for loc in answer.trip.locations
        ]
        if query.alternatives:
            feature["properties"]["alternatives"] = [
                self._feature(self.parse(ValhallaAlternate, a).trip, query)
                for a in answer.alternates
            ]
        feature["properties"]["attribution"] = self.attribution
        return feature

    def _feature(self, trip: ValhallaTrip, query: RouteQuery) -> dict[str, Any]:
        coordinates: list[list[float]] = []
        found = []
        for leg in trip.legs:
            try:
                shape = decode_polyline6(leg.shape)
            except ValueError as exc:
                raise self.bad(str(exc)) from None
            coordinates.extend(shape[1:] if coordinates and shape else shape)
            for m in leg.maneuvers:
                kind, modifier = _MANEUVERS.get(m.type, ("continue", ""))
                begin = m.begin_shape_index
                end = begin if m.end_shape_index is None else m.end_shape_index
                found.append(
                    {
                        "distance": m.length * 1000,
                        "duration": m.time,
                        "name": "; ".join(m.street_names),
                        "mode": m.travel_mode,
                        "maneuver": {
                            "type": kind,
                            "modifier": modifier,
                            "location": shape[begin] if begin < len(shape) else None,
                            "bearing_after": m.bearing_after,
                        },
                        "geometry": {"type": "LineString", "coordinates": shape[begin : end + 1]},
                    }
                )
        if len(coordinates) < 2:
            raise self.bad("a trip has fewer than two points")
        return {
            "type": "Feature",
            "geometry": {"type": "LineString", "coordinates": coordinates},
            "properties": {
                "profile": query.profile,
                "distance": trip.summary.length * 1000,  # asked in kilometres
                "duration": trip.summary.time,
                "steps": found if query.steps else [],
            },
        }
