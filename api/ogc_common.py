"""What the OGC API routes share (landing and collections, Features, Tiles): the media types,
the tile matrix set served, a collection as OGC API shows it, the HTML or JSON page of a
document, and the conformance classes of OGC API – Features."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from api.fields import Query, Text
from api.links import keyed_link, route_path
from shared.base.grid import TMS
from shared.errors import NotFoundError
from shared.raster.paths import RASTER_LAYER_EXAMPLE
from shared.tiles.styles import StyleInfo
from shared.vector.catalog import VectorLayer
from shared.vector.cql import MAX_FILTER_CHARS, CqlFilter, parse_cql
from shared.vector.query import parse_names

__all__ = [
    "CRS84",
    "Crs84",
    "FeatureFilterQuery",
    "FEATURES_CONFORMANCE",
    "GEOJSON",
    "JSON",
    "JSON_PAGE",
    "OGC_REL",
    "TMS_CRS",
    "TMS_ID",
    "TMS_JSON",
    "Collection",
    "CollectionQuery",
    "OgcQuery",
    "collection_id",
    "collection_of",
    "document",
    "raster_collection",
    "tms_id",
    "tms_box",
    "tms_link",
    "vector_collection",
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


OGC_REL = "http://www.opengis.net/def/rel/ogc/1.0/"


class OgcQuery(Query):
    """A page of OGC API: JSON, or HTML."""

    f: Literal["json", "html"] | None = Field(
        None, description="`json` or `html` (default: JSON, HTML when `Accept` prefers it)"
    )


def tms_box(bounds: list[float]) -> list[float]:
    """``bounds`` (``[west, south, east, north]``, degrees) in the tile matrix set's CRS."""
    w, s, e, n = bounds
    left, bottom = TMS.xy(w, s, truncate=True)
    right, top = TMS.xy(e, n, truncate=True)
    return [left, bottom, right, top]


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


def vector_collection(collection_id: str, layer: VectorLayer) -> Collection:
    """The collection of a vector layer (``collection_id``: its id, or an alias of it)."""
    return Collection(collection_id, layer.id, True, layer.bounds, layer.minzoom, layer.maxzoom)


def raster_collection(info: StyleInfo) -> Collection:
    """The collection of a raster layer."""
    return Collection(info.style, info.title, False, info.footprint, 0, info.maxzoom)


def collection_of(collection_id: str, layer: StyleInfo | VectorLayer) -> Collection:
    """The collection of ``layer``, which ``collection_id`` names (the endpoint resolved it)."""
    if isinstance(layer, VectorLayer):
        return vector_collection(collection_id, layer)
    return raster_collection(layer)


def tms_link(request: Request, rel: str = OGC_REL + "tiling-scheme") -> dict[str, Any]:
    """The link to the definition of the tile matrix set served."""
    path = route_path(request, "get_ogc_tile_matrix_set", tileMatrixSetId=TMS_ID)
    return keyed_link(request, rel, path, JSON, f"The tile matrix set {TMS_ID}")


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


JSON_PAGE = {
    "200": {
        "description": "The document (JSON), or with `f=html` a page of it",
        "content": {
            JSON: {"schema": {"type": "object"}},
            "text/html": {"schema": {"type": "string"}},
        },
    }
}


#: the Features and CQL2 conformance classes implemented here (the conformance page lists them)
_FEATURES = "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/"
_FILTER = "http://www.opengis.net/spec/ogcapi-features-3/1.0/conf/"
_CQL2 = "http://www.opengis.net/spec/cql2/1.0/conf/"
FEATURES_CONFORMANCE: tuple[str, ...] = (
    _FEATURES + "core",
    _FEATURES + "geojson",
    _FEATURES + "oas30",
    _FILTER + "queryables",
    _FILTER + "filter",
    _FILTER + "features-filter",
    _CQL2 + "cql2-text",
    _CQL2 + "cql2-json",
    _CQL2 + "basic-cql2",
    _CQL2 + "advanced-comparison-operators",
    _CQL2 + "basic-spatial-functions",
    _CQL2 + "basic-spatial-functions-plus",
    _CQL2 + "spatial-functions",
)


GEOJSON = "application/geo+json"


CRS84 = "http://www.opengis.net/def/crs/OGC/1.3/CRS84"


#: CRS84's URI, the one CRS of bounding boxes and filter geometries
Crs84 = Literal["http://www.opengis.net/def/crs/OGC/1.3/CRS84"]


class FeatureFilterQuery(Query):
    """Which features and properties of a vector collection (OGC API – Features Part 3): what
    items and vector tiles share."""

    properties: str | None = Field(
        None, min_length=1, description="Properties to return: `a,b`", examples=["name"]
    )
    filter: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_FILTER_CHARS,
        description="A CQL2 condition, in CQL2-text or (`filter-lang=cql2-json`) CQL2-JSON; the"
        " `queryables` may be named",
        examples=["continent = 'Europe' AND pop_est > 10000000"],
    )
    filter_lang: Literal["cql2-text", "cql2-json"] | None = Field(
        None, alias="filter-lang", description="The language of `filter` (default `cql2-text`)"
    )
    filter_crs: Crs84 | None = Field(
        None, alias="filter-crs", description="The CRS of the filter's geometries (CRS84)"
    )

    def picked(self, layer: VectorLayer) -> tuple[tuple[str, ...] | None, CqlFilter | None]:
        """The properties named (None: all) and the CQL2 filter (None: none) of ``layer``.

        Raises:
            InvalidInputError: a property ``layer`` lacks, or a filter it refuses.
        """
        cql = (
            None
            if self.filter is None
            else parse_cql(self.filter, layer, self.filter_lang or "cql2-text")
        )
        return parse_names(self.properties, layer, "properties"), cql
