"""Vector data: GeoJSON (spec 4.8), the catalogue, a layer's TileJSON (4.9), its vector tiles."""

from __future__ import annotations

import functools
import logging
from typing import Annotated, Literal
from urllib.parse import quote

from pydantic import AfterValidator, Field, WithJsonSchema
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.access import Rule, visible_layers
from api.answers import MVT, geojson_response, vector_tile_answer
from api.endpoint import Endpoint
from api.fields import AtMost, Box, Flag, Query, layer_id
from api.links import absolute_url, api_prefix, link, route_path, tile_template
from api.openapi.answers import binary, content, json_body
from api.openapi.models import CacheDropped, FeatureCollection, TileJson, VectorCatalogue, ref
from api.services import services
from shared.base.grid import MAX_ZOOM, parse_tile
from shared.params import parse_bbox
from shared.vector.catalog import VectorLayer
from shared.vector.cql import parse_cql
from shared.vector.geojson import GeoJsonParams, geojson
from shared.vector.query import (
    GEOMETRY_TYPES,
    Condition,
    LayerQuery,
    check_geometry_type,
    parse_filter,
    parse_names,
)
from shared.vector.tiles import tilejson

__all__ = ["ENDPOINTS", "MVT", "geojson_response", "vector_tile_answer"]

log = logging.getLogger("mapsvc.api")

_INT32 = 2**31 - 1
_NOCACHE = "1: bypass the cache and compute afresh"
_READ = Rule("reader", layers=("layer",), public=True)


def _geometry_type(text: str) -> str:
    found = check_geometry_type(text)  # refused unless a type's name, in any case (400)
    assert found is not None
    return found


#: a geometry type's name, in any case (upper-cased once parsed)
GeometryType = Annotated[
    str,
    AfterValidator(_geometry_type),
    WithJsonSchema({"type": "string", "enum": sorted(GEOMETRY_TYPES)}),
]


def _ids(text: str | None) -> tuple[str, ...] | None:
    """The feature ids ``id`` names: comma-separated, blanks left out (None: none asked)."""
    if text is None:
        return None
    return tuple(i.strip() for i in text.split(",") if i.strip())


class FeaturesQuery(Query):
    """A vector layer (the path), and which of its features to read: what GeoJSON and vector
    tiles share."""

    layer: str = layer_id()
    props: str | None = Field(
        None,
        min_length=1,
        description="Properties to return: `a,b`",
        examples=["name,continent"],
    )
    filter: str | None = Field(
        None,
        min_length=1,
        description="Conditions `<field><op><value>` separated by `,`; `<op>` is `=`, `!=`,"
        " `>=`, `<=`, `>`, `<` or `~` (contains, any case); `\\,` is a comma in a value. With"
        " `filter-lang`, a CQL2 filter (as OGC API – Features' items take it)",
        examples=["continent=Europe"],
    )
    filter_lang: Literal["cql2-text", "cql2-json"] | None = Field(
        None,
        alias="filter-lang",
        description="The language of `filter`: `cql2-text` or `cql2-json` (absent: the"
        " conditions above)",
    )
    extent: Box | None = Field(
        None,
        description="minx,miny,maxx,maxy in EPSG:4326 (min < max)",
        examples=["-10,35,30,60"],
    )
    id: str | None = Field(None, min_length=1, description="Features by primary key: `1,2`")
    type: GeometryType | None = Field(None, description="Only this geometry type (any case)")
    sql: str | None = Field(
        None,
        min_length=1,
        max_length=100,
        description="Name of a condition registered in the layer config",
    )

    def of(self, layer: VectorLayer) -> LayerQuery:
        """What to read of ``layer``.

        Raises:
            InvalidInputError: a field ``layer`` lacks, a filter that does not parse, an extent
                that is not a box in degrees.
        """
        filters: tuple[Condition, ...] = ()
        cql = None
        if self.filter_lang is not None and self.filter is not None:
            cql = parse_cql(self.filter, layer, self.filter_lang)
        else:
            filters = parse_filter(self.filter, layer)
        return LayerQuery(
            filters=filters,
            cql=cql,
            props=parse_names(self.props, layer, "props"),
            extent=parse_bbox(self.extent, "extent") if self.extent is not None else None,
            ids=_ids(self.id),
            geometry_type=self.type,
            named_query=self.sql,
        )


class GeoJsonQuery(FeaturesQuery):
    """Features of a layer as GeoJSON: which, in which CRS, which page."""

    srid: int = Field(4326, ge=1, le=_INT32, description="Output CRS as an EPSG code")
    limit: Annotated[int | None, AtMost("vector.geojson_max_features")] = Field(
        None,
        ge=1,
        description="Most features (default: the maximum, `MAPSVC_GEOJSON_MAX_FEATURES`)",
    )
    offset: int = Field(0, ge=0, le=_INT32, description="Features to skip")
    geom: Flag = Field(True, description="0: no geometry")
    debug: Flag = Field(False, description="1: add the SQL and its time")
    reload: Flag = Field(False, description="1: read the layer catalogue again")
    nocache: Flag = Field(False, description=_NOCACHE)

    @property
    def reads_catalogue_again(self) -> bool:
        return self.reload


class VectorTileQuery(FeaturesQuery):
    """A tile of a layer's features."""

    z: int = Field(ge=0, le=MAX_ZOOM, description="Zoom", examples=[8])
    x: int = Field(ge=0, le=2**MAX_ZOOM - 1, description="Column, 0..2^z-1", examples=[72])
    y: int = Field(ge=0, le=2**MAX_ZOOM - 1, description="Row, 0..2^z-1", examples=[110])
    nocache: Flag = Field(False, description=_NOCACHE)


class CacheDropQuery(Query):
    """A vector layer whose cache is dropped: looked up in the catalogue read afresh (a table
    just made has its cache dropped too)."""

    layer: str = layer_id()

    @property
    def reads_catalogue_again(self) -> bool:
        return True


class DatasourceQuery(FeaturesQuery):
    """A vector layer, its catalogue entry read afresh or not, and the features its tiles hold
    (carried into the TileJSON's tile URLs)."""

    nocache: Flag = Field(False, description=_NOCACHE)

    @property
    def reads_catalogue_again(self) -> bool:
        return self.nocache


class CatalogueQuery(Query):
    """The catalogue, read afresh or not."""

    nocache: Flag = Field(False, description=_NOCACHE)


async def get_geojson(request: Request, query: GeoJsonQuery, layer: VectorLayer) -> Response:
    """Features of a layer as a GeoJSON FeatureCollection (spec 4.8).

    Built in PostGIS and streamed.
    """
    svc = services(request)
    settings = svc.settings
    params = GeoJsonParams(
        query=query.of(layer),
        srid=query.srid,
        limit=query.limit or settings.vector.geojson_max_features,
        offset=query.offset,
        with_geometry=query.geom,
        debug=query.debug,
        refresh=query.nocache or query.reload,
    )
    answer = await geojson(
        svc.db,
        svc.vector_cache,
        layer,
        params,
        functools.partial(link, request, route_path(request, "get_geojson", layer=layer.id)),
        timeout_ms=settings.vector.statement_timeout_ms,
        buffer_bytes=settings.vector.geojson_buffer_bytes,
        filter_timeout_ms=settings.vector.filter_timeout_ms,
    )
    return await geojson_response(answer, settings.vector.geojson_max_s)


async def list_datasources(request: Request, query: CatalogueQuery) -> JSONResponse:
    """The vector layers the caller may read (anonymous: the public ones).

    Every vector layer the caller may read, with its TileJSON's URL: anonymous callers see the
    public layers (``MAPSVC_PUBLIC_LAYERS``), others those their role and layer grants allow,
    as raster listings do.
    """
    svc = services(request)
    layers = await svc.vector.layers(svc.db, refresh=query.nocache)
    visible = visible_layers(request, sorted(layers))
    base = absolute_url(request, f"{api_prefix(request)}/gis-datasource/")
    return JSONResponse(
        {
            "layers": [
                {
                    "id": layer.id,
                    "geometry_type": layer.geometry_type,
                    "count": layer.count,
                    "bounds": layer.bounds,
                    "minzoom": layer.minzoom,
                    "maxzoom": layer.maxzoom,
                    "tilejson": base + quote(layer.id, safe=""),
                }
                for layer in (layers[name] for name in visible)
            ]
        }
    )


async def get_datasource(
    request: Request, query: DatasourceQuery, layer: VectorLayer
) -> JSONResponse:
    """A vector layer as TileJSON 3.0.0 (spec 2.5, 4.9).

    Its ``tiles`` is the vector tile endpoint, asked with the ``props``, ``filter`` (and
    ``filter-lang``), ``extent``, ``id``, ``type`` and ``sql`` given here, in one form (checked
    against the layer: ``400`` here rather than on every tile), and with the caller's
    ``api_key`` when it came as one. TileJSON wants absolute tile URLs: under
    ``MAPSVC_PUBLIC_URL``, else the request's checked host; this answer is never cached.
    """
    features = query.of(layer)
    path = f"{api_prefix(request)}/vtile/{layer.id}/{{z}}/{{x}}/{{y}}.pbf"
    svc = services(request)
    watched = await svc.vector_cache.watched(svc.db, layer)
    template = tile_template(request, path, params=features.params())
    return JSONResponse(tilejson(layer, template, watched=watched))


async def get_vtile(request: Request, query: VectorTileQuery, layer: VectorLayer) -> Response:
    """A Mapbox Vector Tile of a layer.

    ``204`` when no feature falls in it; gzipped when the client accepts it.
    """
    tile = parse_tile(query.z, query.x, query.y)
    return await vector_tile_answer(request, layer, query.of(layer), tile, refresh=query.nocache)


async def delete_vtile_cache(
    request: Request, query: CacheDropQuery, layer: VectorLayer
) -> JSONResponse:
    """Drop a layer's cached vector tiles and GeoJSON answers.

    Every cached tile and GeoJSON answer of the layer (an operator's call).
    """
    cache = services(request).vector_cache
    return JSONResponse({"layer": layer.id, "epoch": await cache.drop(layer)})


#: an endpoint of the vector layers: a GET of their group
_endpoint = functools.partial(Endpoint, "GET", tag="vector")
#: a look at the layer the parameter ``layer`` names (public ones: anyone's), its data: a query
#: of PostgreSQL, on the caller's share of it
_look = functools.partial(
    _endpoint,
    rule=_READ,
    budget="data",
    errors=(404, 422),
    database=True,
    resolves="vector",
)

ENDPOINTS = [
    _look(
        "/geojson/{layer}",
        get_geojson,
        query=GeoJsonQuery,
        answer={"200": content("application/geo+json", ref(FeatureCollection), "The features")},
    ),
    _endpoint(
        "/gis-datasource",
        list_datasources,
        rule=Rule(None, public=True),  # anonymous callers: the public layers
        budget="data",
        query=CatalogueQuery,
        answer={"200": json_body(VectorCatalogue, "The layers, by id")},
    ),
    _look(
        "/gis-datasource/{layer}",
        get_datasource,
        query=DatasourceQuery,
        answer={"200": json_body(TileJson, "The layer")},
    ),
    _look(
        "/vtile/{layer}/{z}/{x}/{y}.pbf",
        get_vtile,
        budget="tiles",  # a tile, not data
        query=VectorTileQuery,
        answer={
            "200": binary(MVT, "The tile (gzip if asked)"),
            "204": {"description": "No feature falls in the tile"},
        },
    ),
    Endpoint(
        "DELETE",
        "/vtile/{layer}/cache",
        delete_vtile_cache,
        rule=Rule("operator", layers=("layer",)),
        budget="jobs",
        query=CacheDropQuery,
        answer={"200": json_body(CacheDropped, "Dropped")},
        resolves="vector",
        errors=(404,),
        tag="vector",
    ),
]
