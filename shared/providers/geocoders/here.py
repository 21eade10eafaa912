"""HERE reverse geocoding v7 (``/v1/revgeocode``): its items are spec 2.7 ``geocoder_a``."""

from __future__ import annotations

from typing import Annotated, Any

from shared.errors import NotFoundError
from shared.providers._answers import Answer, DictList, Num, ObjectOrEmpty, OptionalObject, Text
from shared.providers.geocoders.base import Geocoder, PointQuery

__all__ = ["Here"]


class HereAddress(Answer):
    """An item's address: the fields of spec 2.7, in its order."""

    label: Text = ""
    countryCode: Text = ""
    countryName: Text = ""
    state: Text = ""
    countyCode: Text = ""
    county: Text = ""
    city: Text = ""
    district: Text = ""
    street: Text = ""
    postalCode: Text = ""
    houseNumber: Text = ""


class HerePosition(Answer):
    """A point of an item."""

    lat: Num
    lng: Num


class HereMapView(Answer):
    """The box of an item."""

    west: Num
    south: Num
    east: Num
    north: Num


class HereItem(Answer):
    """One item: the fields of spec 2.7, in its order, so the model dumps as the spec's item."""

    title: Text = ""
    id: Text = ""
    resultType: Text = ""
    houseNumberType: Text = ""
    address: Annotated[HereAddress, ObjectOrEmpty] = HereAddress()
    position: HerePosition
    access: Annotated[list[HerePosition], DictList] = []
    distance: Num = 0.0
    mapView: Annotated[HereMapView | None, OptionalObject] = None


class HereAnswer(Answer):
    """A revgeocode answer."""

    items: list[HereItem]


class Here(Geocoder):
    """HERE (``MAPSVC_HERE_URL`` and ``MAPSVC_HERE_API_KEY``), for ``geocoder_a`` only."""

    name = "here"
    attribution = ""  # HERE's answer carries none

    async def here_items(self, point: PointQuery) -> list[dict[str, Any]]:
        """HERE's own items at the point, reduced to the fields of spec 2.7."""
        params = {"at": f"{point.y},{point.x}", "lang": point.lang, "limit": 1}
        try:
            body = await self.get_json(
                "v1/revgeocode",
                params,
                secret_params={"apiKey": self.provider.secret()},
                refresh=point.refresh,
            )
        except NotFoundError:  # HERE's 4xx for a point it cannot place
            return []
        return [item.model_dump() for item in self.parse(HereAnswer, body).items]
