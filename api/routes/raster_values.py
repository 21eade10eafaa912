"""What a raster layer's drawing means: its legend (JSON and PNG) and its values at a point."""

from __future__ import annotations

from pydantic import Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.access import Rule
from api.endpoint import Endpoint
from api.fields import style_id
from api.openapi.answers import json_body
from api.openapi.models import Legend, PointValues
from api.rendering import RenderQuery, drawing_of, raster_source
from shared.raster.legend import legend, legend_png
from shared.raster.point import point_values
from shared.tiles.styles import StyleInfo

__all__ = ["ENDPOINTS", "drawing_of"]

_READ = Rule("reader", layers=("style",), public=True)


class LegendQuery(RenderQuery):
    """A raster layer, drawn as the rendering parameters say (none: its own rendering)."""

    style: str = style_id()


class PointQuery(LegendQuery):
    """A point of a raster layer (WGS 84)."""

    lon: float = Field(ge=-180, le=180, description="Longitude", examples=[-77.5])
    lat: float = Field(ge=-90, le=90, description="Latitude", examples=[24.5])


async def get_legend(request: Request, query: LegendQuery, layer: StyleInfo) -> Response:
    """The legend of a raster layer: its colour map or stretch as JSON (``kind``: ``gradient``,
    ``classes``, ``intervals``, ``rgb``, ``gray``; ``min``/``max``; ``entries`` of values and
    colours), drawn with the rendering parameters given (none: the layer's own)."""
    return JSONResponse(legend(drawing_of(layer, query), layer.statistics))


async def get_legend_png(request: Request, query: LegendQuery, layer: StyleInfo) -> Response:
    """The legend of a raster layer as a small PNG: a 256 x 16 bar of a gradient, or a 16 x 16
    swatch of each class."""
    data = await run_in_threadpool(legend_png, drawing_of(layer, query), layer.statistics)
    return Response(data, media_type="image/png", headers={"Cache-Control": "no-cache"})


async def get_point(request: Request, query: PointQuery, layer: StyleInfo) -> Response:
    """The values of a raster layer at a point, as TiTiler's ``/point`` gives them: the bands
    drawn (``bidx``, else every band) or the expression's, of the pixel the point falls in
    (``gdallocationinfo -valonly -wgs84``'s); null where there is no data. ``404`` outside the
    raster."""
    rendering = query.rendering(layer.band_count)
    source = raster_source(layer)
    found = await run_in_threadpool(point_values, source, query.lon, query.lat, rendering)
    return JSONResponse(found)


ENDPOINTS = [
    Endpoint(
        "GET",
        "/rtile/{style}/legend.json",
        get_legend,
        rule=_READ,
        budget="data",
        query=LegendQuery,
        answer={"200": json_body(Legend, "The legend")},
        errors=(400, 404),
        resolves="raster",
        tag="tiles",
    ),
    Endpoint(
        "GET",
        "/rtile/{style}/legend.png",
        get_legend_png,
        rule=_READ,
        budget="data",
        query=LegendQuery,
        answer={
            "200": {
                "description": "The legend",
                "content": {"image/png": {"schema": {"type": "string", "format": "binary"}}},
            }
        },
        errors=(400, 404),
        resolves="raster",
        tag="tiles",
    ),
    Endpoint(
        "GET",
        "/rtile/{style}/point/{lon},{lat}",
        get_point,
        rule=_READ,
        budget="data",
        query=PointQuery,
        answer={"200": json_body(PointValues, "The values")},
        errors=(400, 404),
        resolves="raster",
        tag="tiles",
    ),
]
