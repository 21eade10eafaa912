"""The layers a request names or may see, of those configured: the layer an endpoint's rule read,
resolved for its handler (:func:`resolve_layer`, ``Endpoint.resolves``), and the raster layers
a caller may see."""

from __future__ import annotations

import contextlib
from typing import Literal

from starlette.requests import Request

from api.access import visible_layers
from api.services import services
from shared.errors import InvalidInputError, MapsvcError, NotFoundError
from shared.tiles.styles import StyleInfo, style_ids
from shared.vector.catalog import VectorLayer

__all__ = ["LayerKind", "footprint_of", "raster_layers", "resolve_layer"]

#: what a layer id names: a raster layer (its configuration), a vector layer, or either
LayerKind = Literal["raster", "vector", "any"]


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


async def resolve_layer(
    request: Request, kind: LayerKind, layer_id: str, *, refresh: bool = False
) -> StyleInfo | VectorLayer:
    """The layer of id ``layer_id`` (a vector layer's may be an alias), of ``kind``;
    ``refresh``: the vector catalogue read again first.

    Raises:
        NotFoundError: no such layer of that kind.
        InvalidInputError: a raster layer's id that is not one (``raster`` only).
    """
    svc = services(request)
    if kind == "raster":
        return svc.tiles.style(layer_id)
    if kind == "any":
        with contextlib.suppress(InvalidInputError, NotFoundError):  # not a raster layer's id
            return svc.tiles.style(layer_id)
    try:
        return await svc.vector.layer(svc.db, layer_id, refresh=refresh)
    except NotFoundError:
        if kind == "vector":
            raise
        raise NotFoundError(
            f"no layer {layer_id[:200]!r}: neither a raster layer nor a vector layer"
        ) from None


def footprint_of(layer: StyleInfo | VectorLayer) -> tuple[list[float], int, bool]:
    """A layer's bounds (a raster's footprint), own maxzoom, and whether it is a vector
    layer."""
    if isinstance(layer, StyleInfo):
        return layer.footprint, layer.maxzoom, False
    return layer.bounds, layer.maxzoom, True
