"""The layers a request may see, of those configured."""

from __future__ import annotations

from starlette.requests import Request

from api.access import visible_layers
from api.services import services
from shared.errors import MapsvcError
from shared.tiles.styles import StyleInfo, style_ids

__all__ = ["raster_layers"]


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
