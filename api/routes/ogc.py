"""OGC API – Common (landing page, conformance, collections) and the tile matrix sets, over the
vector layers and the raster layers (the configured styles).

A collection is a vector layer (``public.countries``) or a raster layer (its style id); an id
naming both is the vector layer's. Links are absolute and carry the caller's ``api_key`` when
it came as one (:func:`api.links.keyed_url`), so these answers are never cached. Each page is
JSON, or with ``f=html`` (or a browser's ``Accept``) a small HTML page of the same.
"""

from __future__ import annotations

import functools
import html
import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from api.access import Rule, visible_layers
from api.endpoint import Endpoint
from api.fields import Query, Text
from api.layers import raster_layers
from api.links import keyed_link, route_path
from api.routes.ogc_features import CONFORMANCE as FEATURES_CONFORMANCE
from api.routes.ogc_features import CRS84, GEOJSON
from api.services import services
from shared.errors import InvalidInputError, NotFoundError
from shared.raster.paths import RASTER_LAYER_EXAMPLE
from shared.tiles.grid import TMS
from shared.tiles.styles import StyleInfo
from shared.vector.catalog import VectorLayer

__all__ = [
    "CRS84",
    "ENDPOINTS",
    "JSON",
    "JSON_PAGE",
    "TMS_CRS",
    "TMS_ID",
    "Collection",
    "CollectionQuery",
    "OgcQuery",
    "collection_id",
    "collection_of",
    "document",
    "tms_id",
    "tms_link",
]

JSON = "application/json"
#: the one tile matrix set served, its definition and CRS
TMS_ID = "WebMercatorQuad"
TMS_CRS: str = TMS.model_dump(mode="json")["crs"]


def _tms_document() -> dict[str, Any]:
    """The definition of the tile matrix set served: OGC 2D TMS 2.0 (morecantile's), with its
    bounding box, and the 1.0 names of what GDAL before 3.7 reads (``identifier``,
    ``supportedCRS``, and ``identifier`` and ``topLeftCorner`` of each matrix)."""
    doc = TMS.model_dump(mode="json", exclude_none=True)
    box = TMS.xy_bbox
    doc["boundingBox"] = {
        "lowerLeft": [box.left, box.bottom],
        "upperRight": [box.right, box.top],
        "crs": TMS_CRS,
    }
    matrices = [
        {**m, "identifier": m["id"], "topLeftCorner": m["pointOfOrigin"]}
        for m in doc["tileMatrices"]
    ]
    return {**doc, "identifier": doc["id"], "supportedCRS": TMS_CRS, "tileMatrices": matrices}


TMS_JSON = _tms_document()
_REL = "http://www.opengis.net/def/rel/ogc/1.0/"
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


class OgcQuery(Query):
    """A page of OGC API: JSON, or HTML."""

    f: Literal["json", "html"] | None = Field(
        None, description="`json` or `html` (default: JSON, HTML when `Accept` prefers it)"
    )


def collection_id() -> Any:
    """The field of a collection's id (a path parameter)."""
    return Text(
        240,
        description="A vector layer's id (`schema.table`), or a raster layer's (style) id",
        examples=["public.countries", RASTER_LAYER_EXAMPLE],
    )


class CollectionQuery(OgcQuery):
    """A collection: a vector layer's id, or a raster layer's (its style id)."""

    collectionId: str = collection_id()  # noqa: N815 - OGC's name


class TileMatrixSetQuery(OgcQuery):
    """A tile matrix set by id."""

    tileMatrixSetId: str = Text(  # noqa: N815 - OGC's name
        100, description=f"Tile matrix set id (`{TMS_ID}`)", examples=[TMS_ID]
    )


@dataclass(frozen=True)
class Collection:
    """A vector layer or a raster layer, as OGC API shows it.

    Attributes:
        id: the layer's id.
        title: its name (a raster layer's path).
        vector: a vector layer (else a raster one).
        bounds: where it has data, ``[west, south, east, north]`` in degrees.
        minzoom: its first zoom.
        maxzoom: its last zoom (a raster's own, where its pixels match the tiles').
    """

    id: str
    title: str
    vector: bool
    bounds: list[float]
    minzoom: int
    maxzoom: int

    @property
    def data_type(self) -> str:
        """OGC API – Tiles' ``dataType``: ``vector`` or ``map``."""
        return "vector" if self.vector else "map"


def _vector(collection_id: str, layer: VectorLayer) -> Collection:
    """The collection of a vector layer (``collection_id``: its id, or an alias of it)."""
    return Collection(collection_id, layer.id, True, layer.bounds, layer.minzoom, layer.maxzoom)


def _raster(info: StyleInfo) -> Collection:
    """The collection of a raster layer."""
    return Collection(info.style, info.title, False, info.footprint, 0, info.maxzoom)


async def collection_of(request: Request, collection_id: str) -> Collection:
    """The collection ``collection_id`` names (the rule checked that the caller sees it).

    Raises:
        NotFoundError: no vector layer and no raster layer of that id.
    """
    svc = services(request)
    layers = await svc.vector.layers(svc.db)
    if collection_id in layers:
        return _vector(collection_id, layers[collection_id])
    try:
        return _raster(services(request).tiles.style(collection_id))
    except InvalidInputError:  # not even a style id
        raise NotFoundError("no such collection", collectionId=collection_id[:200]) from None


async def _collections(request: Request) -> list[Collection]:
    """Every collection the caller may see: the vector layers, then the raster layers."""
    svc = services(request)
    layers = await svc.vector.layers(svc.db)
    found = [_vector(name, layers[name]) for name in visible_layers(request, sorted(layers))]
    # an id of a vector layer is the vector layer's collection
    return found + [_raster(info) for info in raster_layers(request) if info.style not in layers]


def tms_link(request: Request, rel: str = _REL + "tiling-scheme") -> dict[str, Any]:
    """The link to the definition of the tile matrix set served."""
    path = route_path(request, "get_ogc_tile_matrix_set", tileMatrixSetId=TMS_ID)
    return keyed_link(request, rel, path, JSON, f"The tile matrix set {TMS_ID}")


def _collection(request: Request, collection: Collection) -> dict[str, Any]:
    """A collection's description: its extent (in CRS84), its data and tiles links."""
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
            f"{_REL}tilesets-{collection.data_type}",
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
    return {
        **described,
        "dataType": collection.data_type,
        "extent": {"spatial": {"bbox": [collection.bounds], "crs": CRS84}},
        "crs": [CRS84],
        "links": links,
    }


def _prefers_html(request: Request, query: OgcQuery) -> bool:
    """Whether to answer HTML: ``f=html``, or no ``f`` and ``text/html`` before any JSON type
    in ``Accept`` (a browser)."""
    if query.f is not None:
        return query.f == "html"
    accept = request.headers.get("accept", "")
    html_at, json_at = accept.find("text/html"), accept.find("json")
    return html_at >= 0 and (json_at < 0 or html_at < json_at)


def _html(title: str, doc: dict[str, Any]) -> str:
    """A small page of ``doc``: its title and description, every link, and the JSON itself;
    every text escaped."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("href"), str):
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    items = "".join(
        f'<li><a href="{html.escape(link["href"])}">{html.escape(str(link.get("title", "")))}'
        f"</a> ({html.escape(str(link.get('rel', '')))}, "
        f"{html.escape(str(link.get('type', '')))})</li>\n"
        for link in found
    )
    text = html.escape(json.dumps(doc, indent=2))
    description = html.escape(str(doc.get("description", "")))
    return (
        '<!doctype html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head>\n<body><h1>{html.escape(title)}</h1>\n"
        f"<p>{description}</p>\n<ul>\n{items}</ul>\n<pre>{text}</pre>\n</body></html>\n"
    )


def document(request: Request, query: OgcQuery, title: str, doc: dict[str, Any]) -> Response:
    """``doc`` as JSON or as an HTML page titled ``title``; never cached (its links may carry
    the caller's key)."""
    headers = {"Cache-Control": "private, no-store", "Vary": "Accept"}
    if _prefers_html(request, query):
        return HTMLResponse(_html(title, doc), headers=headers)
    return JSONResponse(doc, headers=headers)


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
                _REL + "tiling-schemes",
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


async def get_ogc_collection(request: Request, query: CollectionQuery) -> Response:
    """A collection: its extent and the links to its features and tiles."""
    collection = await collection_of(request, query.collectionId)
    return document(request, query, collection.title, _collection(request, collection))


def tms_id(name: str) -> str:
    """``name`` when it is the tile matrix set served.

    Raises:
        NotFoundError: any other.
    """
    if name != TMS_ID:
        raise NotFoundError(
            f"no tile matrix set {name[:100]!r}: only {TMS_ID}", tileMatrixSetId=name[:100]
        )
    return name


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


JSON_PAGE = {
    "200": {
        "description": "The document (JSON), or with `f=html` a page of it",
        "content": {
            JSON: {"schema": {"type": "object"}},
            "text/html": {"schema": {"type": "string"}},
        },
    }
}
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
    ),
    _page("/ogc/tileMatrixSets", list_ogc_tile_matrix_sets),
    _page(
        "/ogc/tileMatrixSets/{tileMatrixSetId}",
        get_ogc_tile_matrix_set,
        query=TileMatrixSetQuery,
        errors=(404,),
    ),
]
