"""OGC API – Common (landing page, conformance, collections) and the tile matrix sets, over the
vector layers and the raster layers (the configured styles).

A collection is a vector layer (``public.countries``) or a raster layer (its style id); an id
naming both is the vector layer's. Links are absolute and carry the caller's ``api_key`` when
it came as one (:func:`api.links.keyed_url`), so these answers are never cached. Each page is
JSON, or with ``f=html`` (or a browser's ``Accept``) a small HTML page of the same.
"""

from __future__ import annotations

import functools
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from api.access import Rule, visible_layers
from api.endpoint import Endpoint
from api.fields import Text
from api.layers import raster_layers
from api.links import keyed_link, route_path
from api.ogc_common import (
    CRS84,
    FEATURES_CONFORMANCE,
    GEOJSON,
    JSON,
    JSON_PAGE,
    OGC_REL,
    TMS_CRS,
    TMS_ID,
    TMS_JSON,
    Collection,
    CollectionQuery,
    OgcQuery,
    collection_of,
    document,
    raster_collection,
    tms_box,
    tms_id,
    tms_link,
    vector_collection,
)
from api.services import services
from shared.base.grid import TMS
from shared.tiles.styles import StyleInfo
from shared.vector.catalog import VectorLayer

__all__ = ["CONFORMANCE", "ENDPOINTS"]


#: what is implemented, and nothing else (docs/api/ogc.md)
CONFORMANCE: tuple[str, ...] = (
    "http://www.opengis.net/spec/ogcapi-common-1/1.0/conf/core",
    "http://www.opengis.net/spec/ogcapi-common-1/1.0/conf/landing-page",
    "http://www.opengis.net/spec/ogcapi-common-1/1.0/conf/json",
    "http://www.opengis.net/spec/ogcapi-common-1/1.0/conf/html",
    "http://www.opengis.net/spec/ogcapi-common-1/1.0/conf/oas30",
    "http://www.opengis.net/spec/ogcapi-common-2/1.0/conf/collections",
    "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/core",
    "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/tileset",
    "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/tilesets-list",
    "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/geodata-tilesets",
    "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/mvt",
    "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/png",
    "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/jpeg",
    "http://www.opengis.net/spec/tms/2.0/conf/tilematrixset",
    "http://www.opengis.net/spec/tms/2.0/conf/json-tilematrixset",
    *FEATURES_CONFORMANCE,
)


class TileMatrixSetQuery(OgcQuery):
    """A tile matrix set by id."""

    tileMatrixSetId: str = Text(  # noqa: N815 - OGC's name
        100, description=f"Tile matrix set id (`{TMS_ID}`)", examples=[TMS_ID]
    )


async def _collections(request: Request) -> list[Collection]:
    """Every collection the caller may see: the vector layers, then the raster layers."""
    svc = services(request)
    layers = await svc.vector.layers(svc.db)
    names = visible_layers(request, sorted(layers))
    found = [vector_collection(name, layers[name]) for name in names]
    # an id of a vector layer is the vector layer's collection
    rasters = [info for info in raster_layers(request) if info.style not in layers]
    return found + [raster_collection(info) for info in rasters]


def _collection(request: Request, collection: Collection) -> dict[str, Any]:
    """A collection's description: its extent, its data and tiles links.

    A vector collection's extent is in CRS84 (OGC API – Features' clients read it so); a raster
    collection's, which has tiles only, in the tile matrix set's CRS, named by ``crs`` (OGC API –
    Common's ``extent.spatial.crs``): GDAL's OGCAPI driver (3.6) reads it as coordinates of the
    tiles' CRS whatever ``crs`` says, and sizes its raster so."""
    named = {"collectionId": collection.id}
    links = [
        keyed_link(
            request,
            "self",
            route_path(request, "get_ogc_collection", **named),
            JSON,
            "This collection",
        ),
        keyed_link(
            request,
            f"{OGC_REL}tilesets-{collection.data_type}",
            route_path(request, "list_ogc_tilesets", **named),
            JSON,
            "Its tilesets",
        ),
    ]
    described: dict[str, Any] = {"id": collection.id, "title": collection.title}
    if collection.vector:
        items = route_path(request, "get_ogc_items", **named)
        links.append(keyed_link(request, "items", items, GEOJSON, "Its features"))
        described["itemType"] = "feature"
    else:
        # the drafts' member GDAL reads: its OAPIF driver (3.6) lists no collection of
        # ``Raster`` data as a feature layer, whose items would be 404
        described["layerDataType"] = "Raster"
    if collection.vector:
        extent = {"bbox": [collection.bounds], "crs": CRS84}
    else:
        extent = {"bbox": [tms_box(collection.bounds)], "crs": TMS_CRS}
    return {
        **described,
        "dataType": collection.data_type,
        "extent": {"spatial": extent},
        "crs": [CRS84],
        "links": links,
    }


async def get_ogc_landing(request: Request, query: OgcQuery) -> Response:
    """The OGC API landing page: the API's description, conformance, collections and tiling
    schemes.

    ``service-desc`` is this API's OpenAPI document, which is OpenAPI 3.1 (its link's type
    says so).
    """
    doc = {
        "title": "mapsvc",
        "description": "Vector and raster layers as OGC API – Features and – Tiles",
        "links": [
            keyed_link(
                request,
                "self",
                route_path(request, "get_ogc_landing"),
                JSON,
                "This document",
            ),
            keyed_link(
                request,
                "service-desc",
                route_path(request, "get_openapi"),
                "application/vnd.oai.openapi+json;version=3.1",
                "The API definition (OpenAPI 3.1)",
            ),
            keyed_link(
                request,
                "conformance",
                route_path(request, "get_ogc_conformance"),
                JSON,
                "The conformance classes implemented",
            ),
            keyed_link(
                request, "data", route_path(request, "list_ogc_collections"), JSON, "Collections"
            ),
            keyed_link(
                request,
                OGC_REL + "tiling-schemes",
                route_path(request, "list_ogc_tile_matrix_sets"),
                JSON,
                "Tile matrix sets",
            ),
        ],
    }
    return document(request, query, "mapsvc OGC API", doc)


async def get_ogc_conformance(request: Request, query: OgcQuery) -> Response:
    """The OGC API conformance classes implemented."""
    return document(request, query, "Conformance", {"conformsTo": list(CONFORMANCE)})


async def list_ogc_collections(request: Request, query: OgcQuery) -> Response:
    """The collections: every vector and raster layer the caller may see."""
    self_link = keyed_link(
        request, "self", route_path(request, "list_ogc_collections"), JSON, "This document"
    )
    collections = [_collection(request, c) for c in await _collections(request)]
    doc = {"links": [self_link], "collections": collections}
    return document(request, query, "Collections", doc)


async def get_ogc_collection(
    request: Request, query: CollectionQuery, layer: StyleInfo | VectorLayer
) -> Response:
    """A collection: its extent and the links to its features and tiles."""
    collection = collection_of(query.collectionId, layer)
    return document(request, query, collection.title, _collection(request, collection))


async def list_ogc_tile_matrix_sets(request: Request, query: OgcQuery) -> Response:
    """The tile matrix sets: WebMercatorQuad."""
    link = tms_link(request, "self")
    doc = {
        "links": [
            keyed_link(
                request,
                "self",
                route_path(request, "list_ogc_tile_matrix_sets"),
                JSON,
                "This document",
            )
        ],
        "tileMatrixSets": [
            {"id": TMS.id, "title": TMS.title, "uri": TMS.uri, "crs": TMS_CRS, "links": [link]}
        ],
    }
    return document(request, query, "Tile matrix sets", doc)


async def get_ogc_tile_matrix_set(request: Request, query: TileMatrixSetQuery) -> Response:
    """A tile matrix set's definition (OGC 2D TMS 2.0, morecantile's); only WebMercatorQuad."""
    tms_id(query.tileMatrixSetId)
    doc = {**TMS_JSON, "links": [tms_link(request, "self")]}
    return document(request, query, str(TMS.title), doc)


#: an OGC API page: a GET of the ogc group; anyone may ask (listings show what they may see)
_page = functools.partial(
    Endpoint,
    "GET",
    tag="ogc",
    rule=Rule(None, public=True),
    budget="data",
    query=OgcQuery,
    answer=JSON_PAGE,
)

ENDPOINTS = [
    _page("/ogc", get_ogc_landing),
    _page("/ogc/", get_ogc_landing, name="get_ogc_landing_slash"),
    _page("/ogc/conformance", get_ogc_conformance),
    _page("/ogc/collections", list_ogc_collections),
    _page(
        "/ogc/collections/{collectionId}",
        get_ogc_collection,
        rule=Rule("reader", layers=("collectionId",), public=True),
        query=CollectionQuery,
        errors=(404,),
        resolves="any",
    ),
    _page("/ogc/tileMatrixSets", list_ogc_tile_matrix_sets),
    _page(
        "/ogc/tileMatrixSets/{tileMatrixSetId}",
        get_ogc_tile_matrix_set,
        query=TileMatrixSetQuery,
        errors=(404,),
    ),
]
