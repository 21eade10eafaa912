"""WMTS 1.0.0 (OGC 07-057r7) for the raster layers: capabilities (KVP and RESTful) and tiles.

Every raster layer the caller may see is offered in ``GoogleMapsCompatible`` (morecantile's
``WebMercatorQuad``, zooms 0..``MAX_ZOOM``) as PNG, WebP and JPEG; its tiles are those of
``rtile`` (the same cache, file, ``ETag`` and ``X-Cache``) in the default language. KVP names
are case-insensitive and errors are ``ows:ExceptionReport`` XML (:mod:`api.ows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal
from xml.etree import ElementTree as ET

from pydantic import Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from api.access import Rule
from api.answers import tile_image
from api.fields import style_id
from api.layers import raster_layers
from api.links import keyed_url, route_path
from api.ows import (
    OWS_NS,
    WMTS_NS,
    XLINK_NS,
    layer_info,
    missing,
    needed,
    ogc_error,
    ows_endpoint,
    xml_response,
)
from api.rendering import RenderQuery, rendering_pairs
from api.services import services
from shared.base.formats import TileFormat, TileVariant
from shared.base.grid import MAX_ZOOM, TMS, TileAddress
from shared.raster.paths import MAX_ID_CHARS

__all__ = ["ENDPOINTS", "TILE_MATRIX_SET"]

#: the one tile matrix set: OGC's well-known scale set of Web Mercator tiles
TILE_MATRIX_SET = "GoogleMapsCompatible"
_WELL_KNOWN = "urn:ogc:def:wkss:OGC:1.0:GoogleMapsCompatible"
_STYLE = "default"
_SIDE = 2**MAX_ZOOM - 1
#: the formats offered, by media type, and the extension of their RESTful URLs
_FORMATS = {f.media_type: f for f in TileFormat}
_MediaType = Literal["image/png", "image/webp", "image/jpeg"]
_TileMatrixSet = Literal["GoogleMapsCompatible"]
_Style = Literal["default"]


class WmtsQuery(RenderQuery):
    """A KVP request: ``GetCapabilities``, or ``GetTile`` with its layer, matrix and format;
    a raster layer drawn with TiTiler's rendering parameters when given (vendor parameters)."""

    SERVICE: Literal["WMTS"] | None = Field(None, description="`WMTS`")
    REQUEST: Literal["GetCapabilities", "GetTile"] | None = Field(
        None, description="The operation (required)"
    )
    VERSION: Literal["1.0.0"] | None = Field(None, description="`1.0.0`")
    LAYER: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_ID_CHARS,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="GetTile: the layer (a raster layer's id)",
    )
    STYLE: _Style | None = Field(None, description="GetTile: `default`")
    TILEMATRIXSET: _TileMatrixSet | None = Field(None, description="GetTile: the matrix set")
    TILEMATRIX: int | None = Field(None, ge=0, le=MAX_ZOOM, description="GetTile: the zoom")
    TILEROW: int | None = Field(None, ge=0, le=_SIDE, description="GetTile: the row")
    TILECOL: int | None = Field(None, ge=0, le=_SIDE, description="GetTile: the column")
    FORMAT: _MediaType | None = Field(None, description="GetTile: the image format")


class WmtsTileQuery(RenderQuery):
    """A RESTful tile: the path's layer, style, matrix set, zoom, row, column and format; a
    raster layer drawn with TiTiler's rendering parameters when given."""

    LAYER: str = style_id("The layer (a raster layer's id)")
    Style: _Style = Field(description="`default`", examples=["default"])
    TileMatrixSet: _TileMatrixSet = Field(description="The matrix set", examples=[TILE_MATRIX_SET])
    TileMatrix: int = Field(ge=0, le=MAX_ZOOM, description="The zoom", examples=[8])
    TileRow: int = Field(ge=0, le=_SIDE, description="The row, 0..2^zoom-1", examples=[110])
    TileCol: int = Field(ge=0, le=_SIDE, description="The column, 0..2^zoom-1", examples=[72])
    format: Literal["png", "webp", "jpg", "jpeg"] = Field(
        description="The image format", examples=["png"]
    )


def _ows(parent: ET.Element, tag: str, text: str | None = None) -> ET.Element:
    element = ET.SubElement(parent, f"{{{OWS_NS}}}{tag}")
    element.text = text
    return element


def _wmts(parent: ET.Element, tag: str, text: str | None = None) -> ET.Element:
    element = ET.SubElement(parent, f"{{{WMTS_NS}}}{tag}")
    element.text = text
    return element


def _operation(parent: ET.Element, name: str, encodings: list[tuple[str, str]]) -> None:
    """An operation of ``ows:OperationsMetadata``: a GET per (URL, encoding)."""
    operation = _ows(parent, "Operation")
    operation.set("name", name)
    http = _ows(_ows(operation, "DCP"), "HTTP")
    for href, encoding in encodings:
        get = _ows(http, "Get")
        get.set(f"{{{XLINK_NS}}}href", href)
        constraint = _ows(get, "Constraint")
        constraint.set("name", "GetEncoding")
        _ows(_ows(constraint, "AllowedValues"), "Value", encoding)


def _tile_matrix_set(contents: ET.Element) -> None:
    """``GoogleMapsCompatible``: morecantile's ``WebMercatorQuad``, zooms 0..``MAX_ZOOM``."""
    tms = _wmts(contents, "TileMatrixSet")
    _ows(tms, "Identifier", TILE_MATRIX_SET)
    _ows(tms, "SupportedCRS", "urn:ogc:def:crs:EPSG::3857")
    _wmts(tms, "WellKnownScaleSet", _WELL_KNOWN)
    for z in range(MAX_ZOOM + 1):
        matrix = TMS.matrix(z)
        element = _wmts(tms, "TileMatrix")
        _ows(element, "Identifier", str(z))
        _wmts(element, "ScaleDenominator", repr(matrix.scaleDenominator))
        x, y = matrix.pointOfOrigin
        _wmts(element, "TopLeftCorner", f"{x!r} {y!r}")
        _wmts(element, "TileWidth", str(matrix.tileWidth))
        _wmts(element, "TileHeight", str(matrix.tileHeight))
        _wmts(element, "MatrixWidth", str(matrix.matrixWidth))
        _wmts(element, "MatrixHeight", str(matrix.matrixHeight))


def _tile_template(
    request: Request, style: str, tile_format: TileFormat, params: Sequence[tuple[str, str]]
) -> str:
    """The RESTful URL template of the tiles of ``style`` in ``tile_format`` (keyed)."""
    placeholders = {n: f"{{{n}}}" for n in ("Style", "TileMatrixSet", "TileMatrix")}
    path = route_path(
        request,
        "get_wmts_tile",
        LAYER=style,
        **placeholders,
        TileRow="{TileRow}",
        TileCol="{TileCol}",
        format=tile_format.value,
    )
    return keyed_url(request, path, params)


def _capabilities(request: Request, params: Sequence[tuple[str, str]] = ()) -> Response:
    """The capabilities document: every raster layer the caller may see; its tile templates
    carry ``params`` (rendering parameters)."""
    kvp = keyed_url(request, route_path(request, "get_wmts"))
    rest = keyed_url(request, route_path(request, "get_wmts_capabilities"))
    root = ET.Element(f"{{{WMTS_NS}}}Capabilities", {"version": "1.0.0"})
    identification = _ows(root, "ServiceIdentification")
    _ows(identification, "Title", "mapsvc")
    _ows(identification, "ServiceType", "OGC WMTS")
    _ows(identification, "ServiceTypeVersion", "1.0.0")
    metadata = _ows(root, "OperationsMetadata")
    _operation(metadata, "GetCapabilities", [(kvp, "KVP"), (rest, "RESTful")])
    _operation(metadata, "GetTile", [(kvp, "KVP")])
    contents = _wmts(root, "Contents")
    for info in raster_layers(request):
        layer = _wmts(contents, "Layer")
        _ows(layer, "Title", info.title)
        w, s, e, n = info.footprint
        box = _ows(layer, "WGS84BoundingBox")
        _ows(box, "LowerCorner", f"{w!r} {s!r}")
        _ows(box, "UpperCorner", f"{e!r} {n!r}")
        _ows(layer, "Identifier", info.style)
        style = _wmts(layer, "Style")
        style.set("isDefault", "true")
        _ows(style, "Identifier", _STYLE)
        for tile_format in TileFormat:
            _wmts(layer, "Format", tile_format.media_type)
        _wmts(_wmts(layer, "TileMatrixSetLink"), "TileMatrixSet", TILE_MATRIX_SET)
        for tile_format in TileFormat:
            _wmts(layer, "ResourceURL").attrib.update(
                {
                    "format": tile_format.media_type,
                    "resourceType": "tile",
                    "template": _tile_template(request, info.style, tile_format, params),
                }
            )
    _tile_matrix_set(contents)
    _wmts(root, "ServiceMetadataURL").set(f"{{{XLINK_NS}}}href", rest)
    return xml_response(root)


async def _tile(
    request: Request,
    style: str,
    z: int,
    row: int,
    col: int,
    tile_format: TileFormat,
    names: tuple[str, str, str],
    query: RenderQuery,
) -> Response:
    """A tile of ``style`` from the tile cache, as ``rtile`` answers it (drawn with the
    rendering parameters of ``query``); ``names``: the parameters of the layer, the row and the
    column."""
    side = 2**z
    for value, name in ((row, names[1]), (col, names[2])):
        if value >= side:
            raise ogc_error(
                f"{name} must be 0..{side - 1} at TileMatrix {z}", "TileOutOfRange", name
            )
    info = layer_info(request, style, names[0])  # 404 naming the layer's parameter
    rendering = query.rendering(info.band_count)
    lang = services(request).settings.default_lang
    tile = TileAddress(z, col, row)
    return await tile_image(
        request, style, lang, tile, TileVariant(tile_format), rendering=rendering
    )


async def get_wmts(request: Request, query: WmtsQuery) -> Response:
    """WMTS 1.0.0 in KVP: ``GetCapabilities`` and ``GetTile``.

    ``GetCapabilities`` lists every raster layer the caller may see (anonymous callers: the
    public ones), its URLs carrying ``api_key`` when the request did. ``GetTile`` answers the
    tile ``rtile`` answers. Parameter names in any case; errors as ``ows:ExceptionReport``.
    """
    if query.REQUEST is None:
        raise missing("REQUEST")
    if query.REQUEST == "GetCapabilities":
        # (~0.1 ms of CPU a layer: off the event loop)
        return await run_in_threadpool(_capabilities, request, rendering_pairs(query.rendering()))
    needed(query.TILEMATRIXSET, "TILEMATRIXSET")
    return await _tile(
        request,
        needed(query.LAYER, "LAYER"),
        needed(query.TILEMATRIX, "TILEMATRIX"),
        needed(query.TILEROW, "TILEROW"),
        needed(query.TILECOL, "TILECOL"),
        _FORMATS[needed(query.FORMAT, "FORMAT")],
        ("LAYER", "TILEROW", "TILECOL"),
        query,
    )


async def get_wmts_capabilities(request: Request) -> Response:
    """WMTS 1.0.0 capabilities, RESTful (``WMTSCapabilities.xml``).

    Every raster layer the caller may see, with its ``ResourceURL`` templates; the URLs carry
    ``api_key`` when the request did.
    """
    return await run_in_threadpool(_capabilities, request)  # (~0.1 ms a layer: off the loop)


async def get_wmts_tile(request: Request, query: WmtsTileQuery) -> Response:
    """A WMTS tile, RESTful: the tile ``rtile`` answers (same cache, ``ETag``, ``X-Cache``)."""
    tile_format = TileFormat.from_extension(query.format)
    names = ("LAYER", "TileRow", "TileCol")
    z, row, col = query.TileMatrix, query.TileRow, query.TileCol
    return await _tile(request, query.LAYER, z, row, col, tile_format, names, query)


_BINARY = {"schema": {"type": "string", "format": "binary"}}
_XML = {"application/xml": {"schema": {"type": "string"}}}
_IMAGES = {f.media_type: _BINARY for f in TileFormat}
_NOT_MODIFIED = {"description": "Not modified (`If-None-Match` matched the `ETag`)"}
_endpoint = ows_endpoint("WMTS")

ENDPOINTS = [
    _endpoint(
        "/wmts",
        get_wmts,
        rule=Rule(None, layers=("LAYER",), public=True),
        budget="tiles",
        query=WmtsQuery,
        answer={
            "200": {"description": "The capabilities, or the tile", "content": {**_XML, **_IMAGES}},
            "304": _NOT_MODIFIED,
        },
        errors=(400, 404),
    ),
    _endpoint(
        "/wmts/1.0.0/WMTSCapabilities.xml",
        get_wmts_capabilities,
        rule=Rule(None, public=True),
        budget="data",
        answer={"200": {"description": "The capabilities", "content": _XML}},
    ),
    _endpoint(
        "/wmts/1.0.0/{LAYER}/{Style}/{TileMatrixSet}/{TileMatrix}/{TileRow}/{TileCol}.{format}",
        get_wmts_tile,
        rule=Rule("reader", layers=("LAYER",), public=True),
        budget="tiles",
        query=WmtsTileQuery,
        answer={"200": {"description": "The tile", "content": _IMAGES}, "304": _NOT_MODIFIED},
        errors=(400, 404),
    ),
]
