"""The layers a request may see, of those configured."""

from __future__ import annotations

import contextlib

from starlette.requests import Request

from api.access import visible_layers
from api.services import services
from shared.errors import InvalidInputError, MapsvcError, NotFoundError
from shared.tiles.styles import StyleInfo, style_ids

__all__ = ["any_layer", "raster_layers"]


def raster_layers(request: Request) -> list[StyleInfo]:
    """Every configured raster layer the caller may see, by id (a configuration that cannot be
    read is left out: its tiles would fail too)."""
    tiles = services(request).tiles
    found = []
    for style in visible_layers(request, style_ids(tiles.mapnik_dir)):
        try:
            found.append(tiles.style(style))
        except MapsvcError:  # removed meanwhile, or not valid XML
            continue
    return found


async def any_layer(request: Request, layer_id: str) -> tuple[list[float], int, bool]:
    """A layer's bounds, own maxzoom, and whether it is a vector layer.

    Raises:
        NotFoundError: neither a raster layer nor a vector layer has the id.
    """
    svc = services(request)
    with contextlib.suppress(InvalidInputError, NotFoundError):  # not a raster layer's id
        info = svc.tiles.style(layer_id)
        return info.footprint, info.maxzoom, False
    try:
        layer = await svc.vector.layer(svc.db, layer_id)
    except NotFoundError:
        raise NotFoundError(
            f"no layer {layer_id[:200]!r}: neither a raster layer nor a vector layer",
            parameter="id",
        ) from None
    return layer.bounds, layer.maxzoom, True
