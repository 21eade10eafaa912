"""WMS 1.3.0 (OGC 06-042) for the raster layers: ``GetCapabilities`` and ``GetMap``.

A map is the BBOX render of ``rtile`` (``api.routes.tiles.render_box``: its size limits, its
renderer) of one layer, in ``EPSG:3857``, ``EPSG:4326`` (its BBOX in latitude, longitude order,
as 1.3.0 says) or ``CRS:84`` (longitude, latitude), as PNG, JPEG or WebP. ``TRANSPARENT=FALSE``
(the default) draws the map over ``BGCOLOR`` (white): no alpha. KVP names are case-insensitive
and errors are ``ServiceExceptionReport`` XML (:mod:`api.ows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal
from xml.etree import ElementTree as ET

from pydantic import Field
from rasterio.warp import transform
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.access import Rule
from api.answers import image_response, render_box
from api.fields import AtMost, Box, Flag
from api.layers import raster_layers
from api.links import keyed_url, route_path
from api.ows import (
    WMS_NS,
    XLINK_NS,
    layer_info,
    needed,
    ogc_error,
    ows_endpoint,
    xml_response,
)
from api.rendering import RenderQuery, drawing_of
from api.services import services
from shared.base.formats import TileFormat, TileVariant
from shared.base.grid import TMS, RenderArea
from shared.errors import NotFoundError
from shared.params import parse_bbox
from shared.raster.legend import legend_png
from shared.raster.paths import MAX_ID_CHARS
from shared.raster.point import point_values
from shared.tiles.store import etag_of
from shared.tiles.styles import StyleInfo

__all__ = ["ENDPOINTS"]

VERSION = "1.3.0"
#: the CRSs of a map, and the CRS its BBOX is rendered in once in longitude, latitude order
_CRSS = {"EPSG:3857": "EPSG:3857", "EPSG:4326": "EPSG:4326", "CRS:84": "EPSG:4326"}
_FORMATS = {f.media_type: f for f in TileFormat}
_MediaType = Literal["image/png", "image/webp", "image/jpeg"]
_WHITE = "0xFFFFFF"
#: Web Mercator's latitude limit
_MAX_LAT = 85.0511287798066


class WmsQuery(RenderQuery):
    """A KVP request: ``GetCapabilities``, or ``GetMap`` with its layer, box, size and format;
    a raster layer drawn with TiTiler's rendering parameters when given (vendor parameters)."""

    SERVICE: Literal["WMS"] | None = Field(None, description="`WMS`")
    REQUEST: Literal["GetCapabilities", "GetMap", "GetFeatureInfo", "GetLegendGraphic"] | None = (
        Field(None, description="The operation (required)")
    )
    VERSION: str | None = Field(
        None, max_length=16, description="`1.3.0` (GetCapabilities: any, answered in 1.3.0)"
    )
    LAYERS: str | None = Field(
        None,
        max_length=2000,
        pattern=r"^[A-Za-z0-9_,-]+$",
        description="GetMap: the layer (a raster layer's id; one)",
    )
    STYLES: str | None = Field(None, max_length=2000, description="GetMap: empty or `default`")
    CRS: str | None = Field(None, max_length=32, description="GetMap: " + ", ".join(_CRSS))
    BBOX: Box | None = Field(
        None,
        description="GetMap: minx,miny,maxx,maxy in the CRS's axis order (EPSG:4326:"
        " minlat,minlon,maxlat,maxlon)",
    )
    WIDTH: Annotated[int | None, AtMost("tiles.max_size")] = Field(
        None, ge=1, description="GetMap: the width in pixels"
    )
    HEIGHT: Annotated[int | None, AtMost("tiles.max_size")] = Field(
        None, ge=1, description="GetMap: the height in pixels"
    )
    FORMAT: _MediaType | None = Field(None, description="GetMap: the image format")
    TRANSPARENT: Flag = Field(False, description="GetMap: `TRUE`: transparent outside the data")
    BGCOLOR: str = Field(
        _WHITE, pattern=r"^0[xX][0-9A-Fa-f]{6}$", description="GetMap: the background, 0xRRGGBB"
    )
    QUERY_LAYERS: str | None = Field(
        None,
        max_length=2000,
        pattern=r"^[A-Za-z0-9_,-]+$",
        description="GetFeatureInfo: the layer queried (one, among `LAYERS`)",
    )
    INFO_FORMAT: Literal["application/json", "text/plain"] | None = Field(
        None, description="GetFeatureInfo: the answer's format"
    )
    I: int | None = Field(None, ge=0, description="GetFeatureInfo: the pixel's column")  # noqa: E741
    J: int | None = Field(None, ge=0, description="GetFeatureInfo: the pixel's row")
    LAYER: str | None = Field(
        None,
        max_length=MAX_ID_CHARS,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="GetLegendGraphic: the layer",
    )


def _wms(parent: ET.Element, tag: str, text: str | None = None) -> ET.Element:
    element = ET.SubElement(parent, f"{{{WMS_NS}}}{tag}")
    element.text = text
    return element


def _online(parent: ET.Element, href: str) -> None:
    _wms(parent, "OnlineResource").attrib.update(
        {f"{{{XLINK_NS}}}type": "simple", f"{{{XLINK_NS}}}href": href}
    )


def _geographic_box(parent: ET.Element, footprint: list[float]) -> None:
    w, s, e, n = footprint
    box = _wms(parent, "EX_GeographicBoundingBox")
    for tag, value in (
        ("westBoundLongitude", w),
        ("eastBoundLongitude", e),
        ("southBoundLatitude", s),
        ("northBoundLatitude", n),
    ):
        _wms(box, tag, repr(value))


def _bounding_boxes(parent: ET.Element, footprint: list[float]) -> None:
    """The layer's box in each CRS, in the CRS's axis order (EPSG:4326: latitude first)."""
    w, s, e, n = footprint
    x0, y0 = TMS.xy(w, max(s, -_MAX_LAT))
    x1, y1 = TMS.xy(e, min(n, _MAX_LAT))
    for crs, box in (
        ("CRS:84", (w, s, e, n)),
        ("EPSG:4326", (s, w, n, e)),
        ("EPSG:3857", (x0, y0, x1, y1)),
    ):
        corners = dict(zip(("minx", "miny", "maxx", "maxy"), map(repr, box), strict=True))
        _wms(parent, "BoundingBox").attrib.update({"CRS": crs, **corners})


def _layer(parent: ET.Element, info: StyleInfo) -> None:
    layer = _wms(parent, "Layer")
    layer.attrib.update({"queryable": "1", "opaque": "0"})
    _wms(layer, "Name", info.style)
    _wms(layer, "Title", info.title)
    _geographic_box(layer, info.footprint)
    _bounding_boxes(layer, info.footprint)
    style = _wms(layer, "Style")
    _wms(style, "Name", "default")
    _wms(style, "Title", "default")


def _capabilities(request: Request) -> Response:
    """The capabilities document: every raster layer the caller may see."""
    tiles = services(request).settings.tiles
    href = keyed_url(request, route_path(request, "get_wms"))
    root = ET.Element(f"{{{WMS_NS}}}WMS_Capabilities", {"version": VERSION})
    service = _wms(root, "Service")
    _wms(service, "Name", "WMS")
    _wms(service, "Title", "mapsvc")
    _online(service, href)
    _wms(service, "LayerLimit", "1")
    _wms(service, "MaxWidth", str(tiles.max_size))
    _wms(service, "MaxHeight", str(tiles.max_size))
    capability = _wms(root, "Capability")
    operations = _wms(capability, "Request")
    for name, formats in (
        ("GetCapabilities", ["text/xml"]),
        ("GetMap", [f.media_type for f in TileFormat]),
        ("GetFeatureInfo", ["application/json", "text/plain"]),
    ):
        operation = _wms(operations, name)
        for media_type in formats:
            _wms(operation, "Format", media_type)
        _online(_wms(_wms(_wms(operation, "DCPType"), "HTTP"), "Get"), href)
    _wms(_wms(capability, "Exception"), "Format", "XML")
    top = _wms(capability, "Layer")
    _wms(top, "Title", "mapsvc")
    for crs in _CRSS:
        _wms(top, "CRS", crs)
    layers = raster_layers(request)
    footprints = [info.footprint for info in layers] or [[-180.0, -_MAX_LAT, 180.0, _MAX_LAT]]
    west, south = min(f[0] for f in footprints), min(f[1] for f in footprints)
    east, north = max(f[2] for f in footprints), max(f[3] for f in footprints)
    _geographic_box(top, [west, south, east, north])
    for info in layers:
        _layer(top, info)
    return xml_response(root, "text/xml")


@dataclass(frozen=True)
class _Map:
    """What a GetMap (or the map of a GetFeatureInfo) asks: its layer, box, CRS and size."""

    info: StyleInfo
    bbox: tuple[float, float, float, float]
    crs: str
    size: tuple[int, int]

    @property
    def area(self) -> RenderArea:
        return RenderArea(self.bbox, *self.size, srs=self.crs.lower())


def _map_of(request: Request, query: WmsQuery) -> _Map:
    """The map a request asks (``LAYERS``, ``STYLES``, ``CRS``, ``BBOX``, ``WIDTH``,
    ``HEIGHT``), checked."""
    if query.VERSION not in (None, VERSION):
        raise ogc_error(f"{query.REQUEST} is WMS {VERSION}", "InvalidParameterValue", "VERSION")
    layers = needed(query.LAYERS, "LAYERS").split(",")
    if len(layers) != 1:
        raise ogc_error(
            "a map draws one layer: LAYERS names one", "InvalidParameterValue", "LAYERS"
        )
    if any(style not in ("", "default") for style in (query.STYLES or "").split(",")):
        raise ogc_error("the one style is default", "StyleNotDefined", "STYLES")
    crs = needed(query.CRS, "CRS").upper()
    if crs not in _CRSS:
        raise ogc_error(f"CRS must be one of {', '.join(_CRSS)}", "InvalidCRS", "CRS")
    x0, y0, x1, y1 = (float(v) for v in needed(query.BBOX, "BBOX").split(","))
    if crs == "EPSG:4326":  # latitude first
        x0, y0, x1, y1 = y0, x0, y1, x1
    bbox = parse_bbox(f"{x0},{y0},{x1},{y1}", "BBOX", _CRSS[crs])
    size = (needed(query.WIDTH, "WIDTH"), needed(query.HEIGHT, "HEIGHT"))
    info = layer_info(request, layers[0], "LAYERS")
    return _Map(info, (bbox[0], bbox[1], bbox[2], bbox[3]), _CRSS[crs], size)


async def _get_map(request: Request, query: WmsQuery) -> Response:
    """A map of one layer (the BBOX render of ``rtile``)."""
    asked = _map_of(request, query)
    tile_format = _FORMATS[needed(query.FORMAT, "FORMAT")]
    info = asked.info
    style, rendering = info.style, query.rendering(info.band_count)
    tiles = services(request).settings.tiles
    area = asked.area
    lang = services(request).settings.default_lang
    names = ("WIDTH", "HEIGHT")
    colour = query.BGCOLOR.upper().replace("0X", "0x")
    opaque = (tile_format.has_alpha and not query.TRANSPARENT) or (
        not tile_format.has_alpha and colour != _WHITE
    )
    # drawn over the background in the render process: the API decodes and encodes nothing
    red, green, blue = (int(colour[i : i + 2], 16) for i in (2, 4, 6))
    background = (red, green, blue) if opaque else None
    variant = TileVariant(tile_format)
    data = await render_box(request, style, lang, area, variant, names, rendering, background)
    return image_response(request, data, tile_format, "MISS", tiles.max_age_s, etag_of(data))


async def _get_feature_info(request: Request, query: WmsQuery) -> Response:
    """The values of the layer at pixel ``I``, ``J`` of the map (the pixel's centre), as
    ``/rtile/{style}/point`` gives them: JSON, or ``band=value`` lines of text."""
    asked = _map_of(request, query)
    queried = needed(query.QUERY_LAYERS, "QUERY_LAYERS")
    if queried != asked.info.style:
        raise ogc_error(
            "QUERY_LAYERS must be the layer of LAYERS", "LayerNotQueryable", "QUERY_LAYERS"
        )
    info_format = needed(query.INFO_FORMAT, "INFO_FORMAT")
    i, j = needed(query.I, "I"), needed(query.J, "J")
    width, height = asked.size
    if i >= width or j >= height:
        name = "I" if i >= width else "J"
        raise ogc_error(f"{name} is outside the map", "InvalidPoint", name)
    x0, y0, x1, y1 = asked.bbox
    x = x0 + (i + 0.5) * (x1 - x0) / width
    y = y1 - (j + 0.5) * (y1 - y0) / height
    lons, lats = transform(asked.crs, "EPSG:4326", [x], [y])
    source = asked.info.source
    if source is None:
        raise ogc_error("the layer is not queryable", "LayerNotQueryable", "QUERY_LAYERS")
    rendering = query.rendering(asked.info.band_count)
    try:
        found = await run_in_threadpool(point_values, source, lons[0], lats[0], rendering)
    except NotFoundError:
        found = {"coordinates": [lons[0], lats[0]], "values": [], "band_names": []}
    found["layer"] = asked.info.style
    if info_format == "application/json":
        return JSONResponse(found)
    lines = [f"Layer '{asked.info.style}'"]
    lines += [f"  {n} = {v}" for n, v in zip(found["band_names"], found["values"], strict=True)]
    return Response("\n".join(lines) + "\n", media_type="text/plain")


async def _get_legend_graphic(request: Request, query: WmsQuery) -> Response:
    """The legend of a layer as a PNG (``/rtile/{style}/legend.png``'s)."""
    if needed(query.FORMAT, "FORMAT") != "image/png":
        raise ogc_error("a legend is image/png", "InvalidFormat", "FORMAT")
    info = layer_info(request, needed(query.LAYER, "LAYER"), "LAYER")
    data = await run_in_threadpool(legend_png, drawing_of(info, query), info.statistics)
    return Response(data, media_type="image/png", headers={"Cache-Control": "no-cache"})


async def get_wms(request: Request, query: WmsQuery) -> Response:
    """WMS 1.3.0 in KVP: ``GetCapabilities``, ``GetMap``, ``GetFeatureInfo`` and
    ``GetLegendGraphic``.

    ``GetCapabilities`` (any ``VERSION``: answered in 1.3.0) lists every raster layer the
    caller may see (anonymous callers: the public ones), its URLs carrying ``api_key`` when the
    request did. ``GetMap`` draws one layer in ``EPSG:3857``, ``EPSG:4326`` or ``CRS:84`` within
    the BBOX render's limits. ``GetFeatureInfo`` gives the raster's values at a pixel of such a
    map (``INFO_FORMAT`` ``application/json`` or ``text/plain``), ``GetLegendGraphic`` the
    layer's legend (``image/png``). TiTiler's rendering parameters draw, query and explain the
    layer as on ``rtile``. Parameter names in any case; errors as ``ServiceExceptionReport``.
    """
    operation = needed(query.REQUEST, "REQUEST")
    if operation == "GetCapabilities":
        return await run_in_threadpool(_capabilities, request)  # (~0.1 ms a layer: off the loop)
    if operation == "GetFeatureInfo":
        return await _get_feature_info(request, query)
    if operation == "GetLegendGraphic":
        return await _get_legend_graphic(request, query)
    return await _get_map(request, query)


_BINARY = {"schema": {"type": "string", "format": "binary"}}
_endpoint = ows_endpoint("WMS")

ENDPOINTS = [
    _endpoint(
        "/wms",
        get_wms,
        rule=Rule(None, layers=("LAYERS", "QUERY_LAYERS", "LAYER"), public=True),
        budget="tiles",
        query=WmsQuery,
        answer={
            "200": {
                "description": "The capabilities, or the map",
                "content": {
                    "text/xml": {"schema": {"type": "string"}},
                    **{f.media_type: _BINARY for f in TileFormat},
                },
            },
            "304": {"description": "Not modified (`If-None-Match` matched the `ETag`)"},
        },
        errors=(400, 404),
    ),
]
