"""The OpenAPI 3.1 document: the routes' paths and methods with their operations."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.routing import BaseRoute, Route

from api.openapi.models import Schema, components
from api.openapi.operations import operations
from shared.settings import Settings

__all__ = ["openapi_document", "openapi_path"]


def openapi_path(route_path: str) -> str:
    """A Starlette route path as an OpenAPI path: ``{path:path}`` becomes ``{path}``."""
    return "/".join(
        part.split(":", 1)[0] + "}" if part.startswith("{") and ":" in part else part
        for part in route_path.split("/")
    )


def openapi_document(routes: Sequence[BaseRoute], settings: Settings, prefix: str) -> Schema:
    """The OpenAPI 3.1 document of ``routes`` as mounted under ``prefix``.

    Args:
        routes: the routes to describe (a route without an operation is left out, which the
            test of the document catches).
        settings: the settings whose limits the parameters state.
        prefix: the mount, ``/api-user`` or ``/api/v1``: the document's server.
    """
    table = operations(settings.tiles.tile_max_size, settings.vector.geojson_max_features)
    paths: dict[str, Schema] = {}
    for route in routes:
        if not isinstance(route, Route) or route.name not in table:
            continue
        item = paths.setdefault(openapi_path(route.path), {})
        for method in sorted((route.methods or set()) - {"HEAD"}):
            item[method.lower()] = table[route.name].as_dict(route.name)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "mapsvc",
            "version": "1",
            "description": "Map-data backend: raster tiles, PostGIS vector data, providers, jobs. "
            'Every failure answers `{"error": {"code", "message", "detail"}}`.',
        },
        "servers": [{"url": prefix}],
        "paths": paths,
        "components": {"schemas": components()},
    }
