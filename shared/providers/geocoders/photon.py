"""Photon (GeoJSON): places by name (``/api``) and at a point (``/reverse``)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from shared.errors import NotFoundError
from shared.providers._answers import Answer, Box, Num, Text
from shared.providers.geocoders.base import GeocodeQuery, Geocoder, PointQuery
from shared.providers.geocoders.place import OSM_ATTRIBUTION, Place

__all__ = ["Photon"]

_OSM_TYPES = {"N": "node", "W": "way", "R": "relation"}


class PhotonProperties(Answer):
    """The ``properties`` of a Photon feature: the parts we map."""

    osm_type: Text = ""
    osm_id: Text = ""
    osm_value: Text = ""
    type: Text = ""
    name: Text = ""
    housenumber: Text = ""
    street: Text = ""
    postcode: Text = ""
    district: Text = ""
    locality: Text = ""
    city: Text = ""
    county: Text = ""
    state: Text = ""
    country: Text = ""
    countrycode: Text = ""
    extent: Box = None  # west, north, east, south


class PhotonGeometry(Answer):
    """A feature's Point."""

    coordinates: Annotated[list[Num], Field(min_length=2)]


class PhotonFeature(Answer):
    """One feature of a Photon answer."""

    geometry: PhotonGeometry
    properties: PhotonProperties

    def place(self) -> Place:
        """The feature as a :class:`Place` (Photon has no label: it is made of the parts)."""
        props = self.properties
        address = {
            "house_number": props.housenumber,
            "street": props.street,
            "postcode": props.postcode,
            "district": props.district or props.locality,
            "city": props.city,
            "county": props.county,
            "state": props.state,
            "country": props.country,
            "country_code": props.countrycode.upper(),
        }
        street = " ".join(p for p in (address["street"], address["house_number"]) if p)
        parts = [props.name, street]
        parts += [" ".join(p for p in (address["postcode"], address["city"]) if p)]
        parts += [address["state"], address["country"]]
        label = ", ".join(dict.fromkeys(p for p in parts if p))
        bbox = None
        if props.extent is not None:
            w, n, e, s = props.extent
            bbox = [w, s, e, n]
        lon, lat = self.geometry.coordinates[:2]
        return Place(
            source_id=f"{_OSM_TYPES.get(props.osm_type, props.osm_type)}/{props.osm_id}",
            name=props.name or street or label.split(",")[0],
            label=label,
            type=props.type or props.osm_value,
            lon=lon,
            lat=lat,
            bbox=bbox,
            address=address,
        )


class PhotonAnswer(Answer):
    """A Photon answer: a FeatureCollection."""

    features: list[PhotonFeature]


class Photon(Geocoder):
    """A Photon server (``MAPSVC_PHOTON_URL``)."""

    name = "photon"
    attribution = OSM_ATTRIBUTION

    async def geocode(self, query: GeocodeQuery) -> list[Place]:
        """Places named ``query.q`` from ``/api`` (a box is its ``bbox``)."""
        params: dict[str, Any] = {"q": query.q, "limit": query.limit, "lang": query.lang}
        if query.bbox:
            params["bbox"] = ",".join(str(v) for v in query.bbox)
        return await self._places("api", params, refresh=query.refresh)

    async def reverse(self, point: PointQuery) -> list[Place]:
        """The place at the point from ``/reverse``."""
        params: dict[str, Any] = {"lat": point.y, "lon": point.x, "lang": point.lang, "limit": 1}
        try:
            return await self._places("reverse", params, refresh=point.refresh)
        except NotFoundError:  # the provider's own 4xx for "nothing here"
            return []

    async def _places(self, path: str, params: dict[str, Any], *, refresh: bool) -> list[Place]:
        body = await self.get_json(path, params, refresh=refresh)
        return [f.place() for f in self.parse(PhotonAnswer, body).features]
