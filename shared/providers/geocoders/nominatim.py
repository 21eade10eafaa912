"""Nominatim (``jsonv2``): places by name (``/search``) and at a point (``/reverse``)."""

from __future__ import annotations

from typing import Annotated, Any

from shared.errors import NotFoundError
from shared.providers._answers import Answer, Box, Num, ObjectOrEmpty, Text
from shared.providers.geocoders.base import GeocodeQuery, Geocoder, PointQuery
from shared.providers.geocoders.place import OSM_ATTRIBUTION, Place

__all__ = ["Nominatim"]


class NominatimAddress(Answer):
    """The ``address`` of a result (``addressdetails=1``): the parts we map."""

    house_number: Text = ""
    road: Text = ""
    pedestrian: Text = ""
    footway: Text = ""
    path: Text = ""
    square: Text = ""
    place: Text = ""
    city_district: Text = ""
    suburb: Text = ""
    borough: Text = ""
    neighbourhood: Text = ""
    quarter: Text = ""
    city: Text = ""
    town: Text = ""
    village: Text = ""
    hamlet: Text = ""
    municipality: Text = ""
    postcode: Text = ""
    county: Text = ""
    state: Text = ""
    country: Text = ""
    country_code: Text = ""

    def parts(self) -> dict[str, str]:
        """The address parts of a :class:`Place` (the first of Nominatim's synonyms set)."""
        return {
            "house_number": self.house_number,
            "street": self.road
            or self.pedestrian
            or self.footway
            or self.path
            or self.square
            or self.place,
            "postcode": self.postcode,
            "district": self.city_district
            or self.suburb
            or self.borough
            or self.neighbourhood
            or self.quarter,
            "city": self.city or self.town or self.village or self.hamlet or self.municipality,
            "county": self.county,
            "state": self.state,
            "country": self.country,
            "country_code": self.country_code.upper(),
        }


class NominatimResult(Answer):
    """One ``jsonv2`` result: a ``/search`` element or the ``/reverse`` answer."""

    osm_type: Text = ""
    osm_id: Text = ""
    name: Text = ""
    display_name: Text = ""
    addresstype: Text = ""
    type: Text = ""
    lon: Num
    lat: Num
    boundingbox: Box = None  # south, north, west, east
    address: Annotated[NominatimAddress, ObjectOrEmpty] = NominatimAddress()

    def place(self) -> Place:
        """The result as a :class:`Place`."""
        address = self.address.parts()
        bbox = None
        if self.boundingbox is not None:
            s, n, w, e = self.boundingbox
            bbox = [w, s, e, n]
        label = self.display_name
        street = " ".join(p for p in (address["street"], address["house_number"]) if p)
        return Place(
            source_id=f"{self.osm_type}/{self.osm_id}",
            name=self.name or street or label.split(",")[0].strip(),
            label=label,
            type=self.addresstype or self.type,
            lon=self.lon,
            lat=self.lat,
            bbox=bbox,
            address=address,
        )


class Nominatim(Geocoder):
    """A Nominatim server (``MAPSVC_NOMINATIM_URL``)."""

    name = "nominatim"
    attribution = OSM_ATTRIBUTION

    async def geocode(self, query: GeocodeQuery) -> list[Place]:
        """Places named ``query.q`` from ``/search`` (a box is its ``viewbox``, ``bounded``)."""
        params: dict[str, Any] = {"q": query.q, "limit": query.limit, "accept-language": query.lang}
        if query.bbox:
            w, s, e, n = query.bbox
            params.update(viewbox=f"{w},{n},{e},{s}", bounded=1)
        return await self._places("search", params, refresh=query.refresh)

    async def reverse(self, point: PointQuery) -> list[Place]:
        """The place at the point from ``/reverse``."""
        params: dict[str, Any] = {"lat": point.y, "lon": point.x, "accept-language": point.lang}
        try:
            return await self._places("reverse", params, refresh=point.refresh)
        except NotFoundError:  # the provider's own 4xx for "nothing here"
            return []

    async def _places(self, path: str, params: dict[str, Any], *, refresh: bool) -> list[Place]:
        query = {"format": "jsonv2", "addressdetails": 1, **params}
        body = await self.get_json(path, query, refresh=refresh)
        if isinstance(body, dict) and "error" in body:  # /reverse: {"error": "Unable to geocode"}
            return []
        items = body if isinstance(body, list) else [body]
        return [self.parse(NominatimResult, item).place() for item in items]
