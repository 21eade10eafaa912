"""OGC API – Tiles: a collection's tilesets, its WebMercatorQuad tileset, and its tiles.

A tile is ``…/tiles/WebMercatorQuad/{tileMatrix}/{tileRow}/{tileCol}`` (zoom, row, column:
OGC's z/y/x), its format the extension (``.png``, ``.webp``, ``.jpg``/``.jpeg`` for a raster
collection, ``.mvt`` for a vector one) or ``f``. Tiles are answered by the very code of
``rtile`` and ``vtile`` (:func:`api.routes.tiles.tile_image`,
:func:`api.routes.vector.vector_tile_answer`): the same cache, file, ``ETag`` and rules; the
nginx front serves them from disk as it serves ``rtile`` (``api.front``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field
from starlette.requests import Request
from starlette.responses import Response

from api.access import Rule
from api.answers import MVT, tile_image, vector_tile_answer
from api.endpoint import Endpoint
from api.fields import Lang
from api.links import keyed_link, route_path
from api.ogc_common import (
    JSON,
    JSON_PAGE,
    TMS_CRS,
    TMS_ID,
    Collection,
    CollectionQuery,
    FeatureFilterQuery,
    collection_id,
    collection_of,
    document,
    tms_box,
    tms_id,
    tms_link,
)
from api.openapi.models import Schema
from api.rendering import RenderQuery, rendering_pairs
from shared.base.formats import TileFormat, TileVariant
from shared.base.grid import MAX_ZOOM, TMS, parse_tile
from shared.errors import InvalidInputError
from shared.tiles.styles import StyleInfo
from shared.vector.catalog import VectorLayer
from shared.vector.query import LayerQuery

__all__ = ["ENDPOINTS"]

_SIDE = 2**MAX_ZOOM - 1
#: the limits of Web Mercator's latitudes, where the grid ends
_MAX_LAT = 85.0511287798
_REL = "http://www.opengis.net/def/rel/ogc/1.0/"
#: a raster collection's tile formats: (extension, media type); PNG first, the default
_IMAGES = (("png", "image/png"), ("webp", "image/webp"), ("jpg", "image/jpeg"))
_Format = Literal["png", "webp", "jpg", "jpeg", "mvt"]
_FORMATS = (
    "`png` (default), `webp`, `jpg` or `jpeg` for a raster collection; `mvt` for a vector one"
)


class TilesetQuery(CollectionQuery, RenderQuery):
    """A collection's tileset in a tile matrix set; a raster's rendering parameters are carried
    into its tile templates."""

    tileMatrixSetId: str = Field(  # noqa: N815 - OGC's name
        min_length=1,
        max_length=100,
        description=f"Tile matrix set id (`{TMS_ID}`)",
        examples=[TMS_ID],
    )


class OgcTileQuery(RenderQuery, FeatureFilterQuery):
    """A tile of a collection: zoom, row, column (OGC's z/y/x); a raster collection drawn with
    TiTiler's rendering parameters when given, a vector one's features picked by ``filter``
    and ``properties`` (as items are)."""

    collectionId: str = collection_id()  # noqa: N815 - OGC's name
    tileMatrixSetId: str = Field(  # noqa: N815 - OGC's name
        min_length=1, max_length=100, description=f"`{TMS_ID}`", examples=[TMS_ID]
    )
    tileMatrix: int = Field(ge=0, le=MAX_ZOOM, description="Zoom", examples=[8])  # noqa: N815
    tileRow: int = Field(ge=0, le=_SIDE, description="Row, 0..2^z-1", examples=[110])  # noqa: N815
    tileCol: int = Field(ge=0, le=_SIDE, description="Column, 0..2^z-1", examples=[72])  # noqa: N815
    lang: Lang = Field("", description="Label language of a raster tile (a configured tag)")


class OgcTileFQuery(OgcTileQuery):
    """A tile whose format is ``f``."""

    f: _Format | None = Field(None, description=f"The tile's format: {_FORMATS}")

    @property
    def asked(self) -> tuple[str | None, str]:
        """The format asked, and the parameter that asked it."""
        return self.f, "f"


class OgcTileFormatQuery(OgcTileQuery):
    """A tile whose format is its extension."""

    format: _Format = Field(description=f"The tile's format: {_FORMATS}", examples=["png"])

    @property
    def asked(self) -> tuple[str | None, str]:
        """The format asked, and the parameter that asked it."""
        return self.format, "format"


def _limits(collection: Collection) -> list[dict[str, Any]]:
    """The tiles of each zoom of ``collection`` that hold its bounds (``tileMatrixSetLimits``)."""
    w, s, e, n = collection.bounds
    w, e = max(w, -180.0), min(e, 180.0)
    s, n = max(s, -_MAX_LAT), min(n, _MAX_LAT)
    limits = []
    for z in range(collection.minzoom, collection.maxzoom + 1):
        first, last, side = TMS.tile(w, n, z), TMS.tile(e, s, z), 2**z - 1
        limits.append(
            {
                "tileMatrix": str(z),
                "minTileRow": max(0, first.y),
                "maxTileRow": min(side, last.y),
                "minTileCol": max(0, first.x),
                "maxTileCol": min(side, last.x),
            }
        )
    return limits


def _tile_links(
    request: Request, collection: Collection, params: Sequence[tuple[str, str]] = ()
) -> list[dict[str, Any]]:
    """The templated links (``rel: item``) to the collection's tiles, one per format, carrying
    ``params`` (a raster's rendering parameters)."""
    formats = (("mvt", MVT),) if collection.vector else _IMAGES
    braces = {name: f"{{{name}}}" for name in ("tileMatrix", "tileRow", "tileCol")}
    links = []
    for extension, media in formats:
        path = route_path(
            request,
            "get_ogc_tile_format",
            collectionId=collection.id,
            tileMatrixSetId=TMS_ID,
            format=extension,
            **braces,
        )
        link = keyed_link(request, "item", path, media, f"A tile ({extension})", params)
        links.append({**link, "templated": True})
    return links


def _tileset_link(request: Request, collection: Collection, rel: str) -> dict[str, Any]:
    path = route_path(
        request, "get_ogc_tileset", collectionId=collection.id, tileMatrixSetId=TMS_ID
    )
    return keyed_link(request, rel, path, JSON, f"Tiles in {TMS_ID}")


def _tileset_summary(request: Request, collection: Collection) -> dict[str, Any]:
    """What a tileset and the list of tilesets say of it."""
    return {
        "title": f"{collection.title} ({TMS_ID})",
        "dataType": collection.data_type,
        "crs": TMS_CRS,
        "tileMatrixSetURI": TMS.uri,
        "links": [_tileset_link(request, collection, "self"), tms_link(request)],
    }


async def list_ogc_tilesets(
    request: Request, query: CollectionQuery, layer: StyleInfo | VectorLayer
) -> Response:
    """A collection's tilesets: one, in WebMercatorQuad."""
    collection = collection_of(query.collectionId, layer)
    path = route_path(request, "list_ogc_tilesets", collectionId=collection.id)
    doc = {
        "links": [keyed_link(request, "self", path, JSON, "This document")],
        "tilesets": [_tileset_summary(request, collection)],
    }
    return document(request, query, f"Tilesets of {collection.title}", doc)


async def get_ogc_tileset(
    request: Request, query: TilesetQuery, layer: StyleInfo | VectorLayer
) -> Response:
    """A collection's tileset in WebMercatorQuad: its zooms, bounds and tile URL templates (a
    raster's carrying the rendering parameters given)."""
    tms_id(query.tileMatrixSetId)
    collection = collection_of(query.collectionId, layer)
    rendering = query.rendering()
    if collection.vector and not rendering.empty:
        raise InvalidInputError(
            "rendering parameters are for raster collections",
            parameter=next(iter(rendering.params())),
        )
    summary = _tileset_summary(request, collection)
    doc = {
        **summary,
        "tileMatrixSetLimits": _limits(collection),
        "boundingBox": _bounding_box(collection),
        "links": [*summary["links"], *_tile_links(request, collection, rendering_pairs(rendering))],
    }
    return document(request, query, summary["title"], doc)


def _bounding_box(collection: Collection) -> dict[str, Any]:
    """A tileset's bounding box: the collection's bounds in the tile matrix set's CRS, the CRS
    of its tiles, named by ``crs`` (OGC 2D TMS's tileset metadata)."""
    left, bottom, right, top = tms_box(collection.bounds)
    return {"lowerLeft": [left, bottom], "upperRight": [right, top], "crs": TMS_CRS}


async def get_ogc_tile(
    request: Request, query: OgcTileFQuery | OgcTileFormatQuery, layer: StyleInfo | VectorLayer
) -> Response:
    """A tile of a collection: an image of a raster collection, an MVT of a vector one.

    Row and column past the zoom's last are ``404`` (no such tile); the tile is the one
    ``rtile``/``vtile`` answer, from the same cache.
    """
    tms_id(query.tileMatrixSetId)
    given, named = query.asked
    tile = parse_tile(query.tileMatrix, query.tileCol, query.tileRow)
    collection = collection_of(query.collectionId, layer)
    rendering = query.rendering()
    if collection.vector and not rendering.empty:
        raise InvalidInputError(
            "rendering parameters are for raster collections",
            parameter=next(iter(rendering.params())),
        )
    if isinstance(layer, VectorLayer):
        if given not in (None, "mvt"):
            raise InvalidInputError(
                "a vector collection's tiles are mvt", parameter=named, value=given
            )
        props, cql = query.picked(layer)
        features = LayerQuery(props=props, cql=cql)
        return await vector_tile_answer(request, layer, features, tile, refresh=False)
    picked = next((n for n in ("properties", "filter") if getattr(query, n) is not None), None)
    if picked is not None:
        raise InvalidInputError(f"{picked} is for vector collections", parameter=picked)
    if given == "mvt":
        raise InvalidInputError(
            "a raster collection's tiles are png, webp, jpg or jpeg", parameter=named, value=given
        )
    variant = TileVariant(TileFormat.from_extension(given or "png"), 1)
    band_count = layer.band_count
    return await tile_image(
        request,
        collection.id,
        query.lang,
        tile,
        variant,
        rendering=query.rendering(band_count),
    )


_TILE_OK: dict[str, Schema] = {
    "200": {
        "description": "The tile: an image (raster collection) or an MVT (vector collection)",
        "content": {
            **{media: {"schema": {"type": "string", "format": "binary"}} for _, media in _IMAGES},
            MVT: {"schema": {"type": "string", "format": "binary"}},
        },
    },
    "204": {"description": "No feature falls in the tile (vector collection)"},
    "304": {"description": "Not modified (`If-None-Match` matched the `ETag`)"},
}
#: the rule of a collection's routes: readers of the layer (public ones: anyone)
_READ = Rule("reader", layers=("collectionId",), public=True)
_endpoint = functools.partial(Endpoint, "GET", tag="ogc", rule=_READ, errors=(404,), resolves="any")
_TILE = "/ogc/collections/{collectionId}/tiles/{tileMatrixSetId}/{tileMatrix}/{tileRow}/{tileCol}"

#: the extension form first: the other would take ``72.png`` for a column
ENDPOINTS = [
    _endpoint(
        "/ogc/collections/{collectionId}/tiles",
        list_ogc_tilesets,
        budget="data",
        query=CollectionQuery,
        answer=JSON_PAGE,
    ),
    _endpoint(
        "/ogc/collections/{collectionId}/tiles/{tileMatrixSetId}",
        get_ogc_tileset,
        budget="data",
        query=TilesetQuery,
        answer=JSON_PAGE,
    ),
    _endpoint(
        _TILE + ".{format}",
        get_ogc_tile,
        budget="tiles",
        query=OgcTileFormatQuery,
        answer=_TILE_OK,
        name="get_ogc_tile_format",
        summary="A tile of a collection, its format the extension",
    ),
    _endpoint(
        _TILE,
        get_ogc_tile,
        budget="tiles",
        query=OgcTileFQuery,
        answer=_TILE_OK,
    ),
]
