"""OGC API – Features over the vector layers: Part 1 (core, GeoJSON, OAS 3.0) and Part 3's
``filter`` in CQL2-text or CQL2-JSON, with the queryables.

A collection is a vector layer (``public.countries``); its items are the GeoJSON of
``/geojson/{layer}``, made by the same query (:func:`shared.vector.geojson.geojson`), with OGC
API's names for the parameters (``bbox``, ``properties``, ``filter``) and OGC API's members in
the answer (``timeStamp``, links with their media type). Links are absolute and carry the
caller's ``api_key`` when it came as one (:func:`api.links.keyed_url`), as GDAL and QGIS follow
them; such answers are never kept by an HTTP cache, and an answer holding a key is not kept in
the vector cache either.

``limit`` above ``MAPSVC_GEOJSON_MAX_FEATURES`` is that maximum, not an error (OGC API –
Features Part 1, ``/req/core/fc-limit-response-1``); ``next`` links page on.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from typing import Annotated, Literal

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.access import Rule
from api.answers import geojson_response
from api.endpoint import Endpoint
from api.fields import Clamped, Declared, Query, Text
from api.links import keyed_link, keyed_url, route_path
from api.ogc_common import CRS84, GEOJSON, Crs84, FeatureFilterQuery
from api.openapi.answers import content
from api.openapi.models import Feature, FeatureCollection, ref
from api.services import services
from shared.errors import InvalidInputError, NotFoundError
from shared.params import parse_bbox
from shared.vector.catalog import VectorLayer
from shared.vector.cql import queryables
from shared.vector.features import open_geojson
from shared.vector.geojson import GeoJsonParams, OgcMembers, geojson
from shared.vector.query import LayerQuery

__all__ = ["ENDPOINTS"]


WEB_MERCATOR = "http://www.opengis.net/def/crs/EPSG/0/3857"
#: the output CRSs offered, by URI: their EPSG codes
_SRIDS = {CRS84: 4326, WEB_MERCATOR: 3857}
_Crs = Literal[
    "http://www.opengis.net/def/crs/OGC/1.3/CRS84", "http://www.opengis.net/def/crs/EPSG/0/3857"
]
_INT32 = 2**31 - 1
DEFAULT_LIMIT = 10
#: a parameter of the GeoJSON query (:meth:`GeoJsonParams.link_params`) by its OGC API name
_OGC_NAMES = {"props": "properties", "extent": "bbox"}
#: who reads a collection: public layers anyone, others by grant; its data budget
_READ = Rule("reader", layers=("collectionId",), public=True)


class CollectionQuery(Query):
    """A feature collection: a vector layer by id."""

    collectionId: str = Text(  # noqa: N815 - OGC's name
        240, description="A vector layer's id (`schema.table`)", examples=["public.countries"]
    )
    f: Literal["json", "geojson"] | None = Field(None, description="`json` (the only format)")


class ItemQuery(CollectionQuery):
    """One feature of a collection, in a CRS."""

    featureId: str = Text(  # noqa: N815 - OGC's name
        200, description="The feature's id (its primary key)", examples=["1"]
    )
    crs: _Crs | None = Field(None, description="Output CRS (default CRS84)")


class ItemsQuery(CollectionQuery, FeatureFilterQuery):
    """Which features of a collection, in which CRS, which page."""

    limit: Annotated[int, Clamped("vector.geojson_max_features"), Declared("limit")] = Field(
        DEFAULT_LIMIT,
        ge=1,
        le=_INT32,
        description="Most features a page (above the maximum, `MAPSVC_GEOJSON_MAX_FEATURES`:"
        " that maximum)",
    )
    offset: int = Field(0, ge=0, le=_INT32, description="Features to skip")
    bbox: str | None = Field(
        None,
        min_length=1,
        max_length=300,
        description="minx,miny,maxx,maxy (or with minz, maxz: 6 numbers) in CRS84",
        examples=["-10,35,30,60"],
    )
    bbox_crs: Crs84 | None = Field(
        None, alias="bbox-crs", description="The CRS of `bbox` (CRS84 only)"
    )
    crs: _Crs | None = Field(None, description="Output CRS (default CRS84)")


async def _collection(request: Request, collection_id: str) -> VectorLayer:
    """The vector layer of a collection (the rule checked that the caller sees it).

    Raises:
        NotFoundError: no vector layer of that id (a raster layer has tiles, no items).
    """
    svc = services(request)
    layers = await svc.vector.layers(svc.db)
    if collection_id not in layers:
        raise NotFoundError(
            f"no feature collection {collection_id[:200]!r}: items are those of the vector "
            "layers (/ogc/collections lists them)",
            collectionId=collection_id[:200],
        )
    return layers[collection_id]


def _bbox(text: str | None) -> tuple[float, float, float, float] | None:
    """``bbox``: 4 numbers, or 6 with heights (left out), in CRS84."""
    if text is None:
        return None
    parts = text.split(",")
    if len(parts) == 6:
        parts = [parts[0], parts[1], parts[3], parts[4]]
    return parse_bbox(",".join(parts), "bbox")


def _ogc_params(params: Sequence[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """The GeoJSON query's parameters under their OGC API names (``srid``: ``crs``)."""
    for name, value in params:
        if name == "srid":
            yield "crs", next(uri for uri, srid in _SRIDS.items() if str(srid) == value)
        else:
            yield _OGC_NAMES.get(name, name), value


def _items_link(request: Request, path: str, params: Sequence[tuple[str, str]]) -> str:
    return keyed_url(request, path, list(_ogc_params(params)))


def _collection_link(request: Request, layer: VectorLayer) -> dict[str, str]:
    path = route_path(request, "get_ogc_collection", collectionId=layer.id)
    return keyed_link(request, "collection", path, "application/json", layer.id)


def _headers(crs: str) -> dict[str, str]:
    """Headers of a feature answer: its CRS (Part 2's header), and no HTTP cache (it holds
    absolute links, maybe a key)."""
    return {"Content-Crs": f"<{crs}>", "Cache-Control": "private, no-store"}


async def get_ogc_items(request: Request, query: ItemsQuery) -> Response:
    """Features of a collection (OGC API – Features), as GeoJSON.

    Filtered by ``bbox`` and a CQL2 ``filter`` (text or JSON), paged by ``limit`` and
    ``offset`` with ``next``/``prev`` links; ``numberMatched`` counts every match.
    """
    svc = services(request)
    settings = svc.settings.vector
    layer = await _collection(request, query.collectionId)
    props, cql = query.picked(layer)
    crs = query.crs or CRS84
    params = GeoJsonParams(
        query=LayerQuery(props=props, extent=_bbox(query.bbox), cql=cql),
        srid=_SRIDS[crs],
        limit=min(query.limit, settings.geojson_max_features),
        offset=query.offset,
        with_geometry=True,
        debug=False,
        refresh="api_key" in request.query_params,  # a key is never kept in the cache
    )
    path = route_path(request, "get_ogc_items", collectionId=layer.id)
    answer = await geojson(
        svc.db,
        svc.vector_cache,
        layer,
        params,
        functools.partial(_items_link, request, path),
        timeout_ms=settings.statement_timeout_ms,
        buffer_bytes=settings.geojson_buffer_bytes,
        filter_timeout_ms=settings.filter_timeout_ms,
        ogc=OgcMembers(GEOJSON, (_collection_link(request, layer),)),
    )
    return await geojson_response(answer, settings.geojson_max_s, _headers(crs))


async def get_ogc_item(request: Request, query: ItemQuery) -> Response:
    """A feature of a collection by id (OGC API – Features), as GeoJSON.

    Its id is the layer's primary key: a layer without one has no feature ids (``404``).
    """
    svc = services(request)
    settings = svc.settings.vector
    layer = await _collection(request, query.collectionId)
    if layer.primary_key is None:
        raise NotFoundError(
            f"layer {layer.id} has no primary key: its features have no id to fetch one by",
            featureId=query.featureId,
        )
    crs = query.crs or CRS84
    try:
        page = await open_geojson(
            svc.db,
            layer,
            LayerQuery(ids=(query.featureId,)),
            srid=_SRIDS[crs],
            with_geometry=True,
            limit=1,
            offset=0,
            timeout_ms=settings.statement_timeout_ms,
            buffer_bytes=settings.geojson_buffer_bytes,
        )
    except InvalidInputError:  # not a value of the key's type: no such feature
        page = None
    found = [] if page is None else [text async for text in page.batches()]
    if not found:
        raise NotFoundError(
            f"no feature {query.featureId[:100]!r} in {layer.id}", featureId=query.featureId
        )
    feature = json.loads(found[0])
    path = route_path(request, "get_ogc_item", collectionId=layer.id, featureId=query.featureId)
    feature["links"] = [
        keyed_link(request, "self", path, GEOJSON, "This feature"),
        _collection_link(request, layer),
    ]
    return JSONResponse(feature, media_type=GEOJSON, headers=_headers(crs))


async def get_ogc_queryables(request: Request, query: CollectionQuery) -> JSONResponse:
    """What a filter of a collection may name (OGC API – Features Part 3), as JSON Schema.

    Each field with its type, and the geometry.
    """
    layer = await _collection(request, query.collectionId)
    path = route_path(request, "get_ogc_queryables", collectionId=layer.id)
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": keyed_url(request, path),
        "type": "object",
        "title": layer.id,
        "properties": queryables(layer),
        "additionalProperties": False,
    }
    return JSONResponse(
        schema, media_type="application/schema+json", headers={"Cache-Control": "private, no-store"}
    )


#: an endpoint of a feature collection: a look at the layer ``collectionId`` names, its data (a
#: query of PostgreSQL, on the caller's share of it)
_look = functools.partial(
    Endpoint, "GET", rule=_READ, budget="data", errors=(404, 422), tag="ogc", database=True
)

ENDPOINTS = [
    _look(
        "/ogc/collections/{collectionId}/items",
        get_ogc_items,
        query=ItemsQuery,
        answer={"200": content(GEOJSON, ref(FeatureCollection), "The features")},
    ),
    _look(
        "/ogc/collections/{collectionId}/items/{featureId}",
        get_ogc_item,
        query=ItemQuery,
        answer={"200": content(GEOJSON, ref(Feature), "The feature")},
    ),
    _look(
        "/ogc/collections/{collectionId}/queryables",
        get_ogc_queryables,
        query=CollectionQuery,
        answer={"200": content("application/schema+json", {"type": "object"}, "The queryables")},
    ),
]
