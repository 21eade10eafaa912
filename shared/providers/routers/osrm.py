"""OSRM (``/route/v1``): the route with GeoJSON geometries, already in the API's shape."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

from shared.errors import NotFoundError
from shared.providers._answers import Answer, DictList, Num, Text
from shared.providers.routers.base import RouteQuery, Router
from shared.providers.upstream import round_coord

__all__ = ["Osrm"]


class OsrmManeuver(Answer):
    """A step's maneuver, with the fields the API keeps in its order."""

    type: Text = ""
    modifier: Text = ""
    location: Any = None
    bearing_after: Any = None


class OsrmStep(Answer):
    """One step, with the fields the API keeps in its order (so it dumps as the API's step)."""

    distance: Num = 0.0
    duration: Num = 0.0
    name: Text = ""
    mode: Text = ""
    maneuver: OsrmManeuver
    geometry: Any = None


class OsrmLeg(Answer):
    """A leg between two points; its steps only when asked for."""

    steps: Annotated[list[OsrmStep], BeforeValidator(lambda v: v or [])] = []


class OsrmGeometry(Answer):
    """A route's geometry (``geometries=geojson``)."""

    type: Literal["LineString"]
    coordinates: list[Any]


class OsrmRoute(Answer):
    """One route."""

    geometry: OsrmGeometry
    distance: Num
    duration: Num
    legs: Annotated[list[OsrmLeg], DictList] = []

    def feature(self, profile: str) -> dict[str, Any]:
        """The route as the API's Feature (without waypoints and attribution)."""
        return {
            "type": "Feature",
            "geometry": {"type": "LineString", "coordinates": self.geometry.coordinates},
            "properties": {
                "profile": profile,
                "distance": self.distance,
                "duration": self.duration,
                "steps": [step.model_dump() for leg in self.legs for step in leg.steps],
            },
        }


class OsrmWaypoint(Answer):
    """A point of the route as snapped to the road network."""

    name: Text = ""
    location: Any = None
    distance: Any = None


class OsrmAnswer(Answer):
    """A ``/route`` answer: its code, the routes (best first, each read when used), waypoints."""

    code: str
    routes: list[Any] = []
    waypoints: Annotated[list[OsrmWaypoint], DictList] = []


class Osrm(Router):
    """An OSRM server (``MAPSVC_OSRM_URL``); the API's profiles are OSRM's own."""

    name = "osrm"
    attribution = "Routing © OSRM, data © OpenStreetMap contributors, ODbL 1.0"

    async def route(self, query: RouteQuery) -> dict[str, Any]:
        """The route from ``/route/v1/<profile>`` (see :meth:`Router.route`)."""
        coords = ";".join(f"{round_coord(x)},{round_coord(y)}" for x, y in query.points)
        params = {
            "overview": "full",
            "geometries": "geojson",
            "steps": str(query.steps).lower(),
            "alternatives": str(query.alternatives).lower(),
        }
        path = f"route/v1/{query.profile}/{coords}"
        body = await self.get_json(path, params, refresh=query.refresh)
        answer = self.parse(OsrmAnswer, body)
        if answer.code != "Ok" or not answer.routes:
            raise NotFoundError(
                f"no route between the points ({answer.code})",
                provider=self.provider.name,
                code=answer.code,
            )
        best, *others = answer.routes
        feature = self.parse(OsrmRoute, best).feature(query.profile)
        feature["properties"]["waypoints"] = [w.model_dump() for w in answer.waypoints]
        if query.alternatives:
            feature["properties"]["alternatives"] = [
                self.parse(OsrmRoute, r).feature(query.profile) for r in others
            ]
        feature["properties"]["attribution"] = self.attribution
        return feature
