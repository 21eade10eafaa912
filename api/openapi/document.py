"""The OpenAPI 3.1 document: the routes' paths and methods with their operations."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.routing import BaseRoute, Route

from api.access import RULES, Rule
from api.openapi.models import Schema, components
from api.openapi.operation import error_answer
from api.openapi.operations import operations
from shared.settings import Settings
from shared.version import VERSION

__all__ = ["openapi_document", "openapi_path"]


def openapi_path(route_path: str) -> str:
    """A Starlette route path as an OpenAPI path: ``{path:path}`` becomes ``{path}``."""
    return "/".join(
        part.split(":", 1)[0] + "}" if part.startswith("{") and ":" in part else part
        for part in route_path.split("/")
    )


#: every way to send credentials: any one of them is enough
_CREDENTIALS: list[Schema] = [{"bearer": []}, {"apiKey": []}, {"basic": []}, {"oauth2": []}]


def _security_schemes(prefix: str) -> Schema:
    token_url = f"{prefix}/oauth/token"
    return {
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "An access token (`/oauth/token`, `POST /api/auth`) or an API key",
        },
        "apiKey": {"type": "apiKey", "in": "query", "name": "api_key"},
        "basic": {"type": "http", "scheme": "basic", "description": "A user's login and password"},
        "oauth2": {
            "type": "oauth2",
            "flows": {
                "password": {"tokenUrl": token_url, "refreshUrl": token_url, "scopes": {}},
                "authorizationCode": {
                    "authorizationUrl": f"{prefix}/oauth/authorize",
                    "tokenUrl": token_url,
                    "refreshUrl": token_url,
                    "scopes": {},
                },
            },
        },
    }


def _secured(op: Schema, rule: Rule) -> Schema:
    """``op`` with the credentials its rule asks for and the refusals it may give."""
    if rule.role is None:  # open; credentials widen a listing of public layers
        return {**op, "security": [{}, *_CREDENTIALS] if rule.public else []}
    if rule.public:  # `{}`: public layers need none
        op = {**op, "security": [{}, *_CREDENTIALS]}
    refusals = {401, 403, 429} | ({404} if rule.layers else set())
    for status in sorted(refusals):
        op["responses"].setdefault(str(status), error_answer(status))
    return op


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
            op = table[route.name].as_dict(route.name)
            item[method.lower()] = _secured(op, RULES[route.name])
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "mapsvc",
            "version": VERSION,
            "description": "Map-data backend: raster tiles, PostGIS vector data, providers, jobs. "
            'Every failure answers `{"error": {"code", "message", "detail"}}`.',
        },
        "servers": [{"url": prefix}],
        "security": _CREDENTIALS,
        "paths": paths,
        "components": {"schemas": components(), "securitySchemes": _security_schemes(prefix)},
    }
