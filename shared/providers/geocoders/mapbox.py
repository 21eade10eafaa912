"""Mapbox geocoding v5 (``mapbox.places``): its features are spec 2.7 ``map``."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from shared.errors import NotFoundError
from shared.providers._answers import Answer, DictList, ListOrEmpty, Num, ObjectOrEmpty, Text
from shared.providers.geocoders.base import Geocoder, PointQuery

__all__ = ["Mapbox"]


class MapboxProperties(Answer):
    """A feature's properties: the ones spec 2.7 keeps."""

    accuracy: Text = ""
    mapbox_id: Text = ""


class MapboxContext(Answer):
    """One element of a feature's context."""

    id: Text = ""
    text: Text = ""


class MapboxFeature(Answer):
    """One feature of a ``mapbox.places`` answer."""

    id: Text = ""
    place_type: Annotated[list[Text], ListOrEmpty] = []
    relevance: Num = 1.0
    properties: Annotated[MapboxProperties, ObjectOrEmpty] = MapboxProperties()
    text: Text = ""
    place_name: Text = ""
    center: Annotated[list[Num], Field(min_length=2, max_length=2)]
    address: Text = ""
    context: Annotated[list[MapboxContext], DictList] = []

    def spec(self) -> dict[str, Any]:
        """The feature with the fields of spec 2.7 (``mapbox_id`` → ``geocoder_b_id``)."""
        lon, lat = self.center
        return {
            "id": self.id,
            "type": "Feature",
            "place_type": self.place_type,
            "relevance": self.relevance,
            "properties": {
                "accuracy": self.properties.accuracy,
                "geocoder_b_id": self.properties.mapbox_id or self.id,
            },
            "text": self.text,
            "place_name": self.place_name,
            "center": [lon, lat],
            "geometry": {"type": "Point", "coordinates": [lon, lat]},
            "address": self.address,
            "context": [c.model_dump() for c in self.context],
        }


class MapboxAnswer(Answer):
    """A ``mapbox.places`` answer: a FeatureCollection with its attribution."""

    features: list[MapboxFeature]
    attribution: Text = ""


class Mapbox(Geocoder):
    """Mapbox (``MAPSVC_MAPBOX_URL`` and ``MAPSVC_MAPBOX_API_KEY``), for ``map`` only."""

    name = "mapbox"
    attribution = ""  # each answer carries its own

    async def mapbox_features(self, point: PointQuery) -> tuple[list[dict[str, Any]], str]:
        """Mapbox's own features at the point, and the attribution of the answer."""
        try:
            body = await self.get_json(
                f"geocoding/v5/mapbox.places/{point.x},{point.y}.json",
                {"language": point.lang},
                secret_params={"access_token": self.provider.secret()},
                refresh=point.refresh,
            )
        except NotFoundError:
            return [], ""
        answer = self.parse(MapboxAnswer, body)
        return [f.spec() for f in answer.features], answer.attribution
