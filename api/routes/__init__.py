"""Every endpoint of the API, and the routes derived from them: under ``/api-user`` and again
under ``/api/v1``, and at the root (``api.endpoint``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from api import metrics
from api.access import Rule
from api.documents import send
from api.endpoint import Endpoint, routes
from api.links import api_prefix
from api.openapi import openapi_document
from api.openapi.answers import content
from api.routes import (
    admin,
    auth,
    export,
    jobs,
    ogc,
    ogc_features,
    ogc_tiles,
    pdf,
    providers,
    raster,
    raster_values,
    seeds,
    system,
    tile_cache,
    tiles,
    vector,
    watch,
    web,
    wms,
    wmts,
)
from api.services import services, settings_of

__all__ = ["ENDPOINTS", "MOUNTED", "ROOT_ROUTES", "ROUTES"]


async def get_openapi(request: Request) -> Response:
    """This document.

    The OpenAPI 3.1 document of every endpoint under the mounts, its server the mount it was
    asked through; built once per mount (``ETag``, ``304`` on ``If-None-Match``).
    """
    settings, prefix = settings_of(request), api_prefix(request)
    built = await services(request).documents.get(
        ("openapi", prefix), lambda: openapi_document(MOUNTED, settings, prefix)
    )
    return send(request, built, "public, max-age=300")


_OPENAPI = Endpoint(
    "GET",
    "/openapi.json",
    get_openapi,
    rule=Rule(None),
    budget="documents",
    answer={"200": content("application/json", {"type": "object"}, "OpenAPI 3.1")},
    tag="system",
)


#: every endpoint, in routing order
ENDPOINTS: list[Endpoint] = [
    *web.ENDPOINTS,
    *system.ENDPOINTS,
    _OPENAPI,
    *jobs.ENDPOINTS,
    *raster.ENDPOINTS,
    *tiles.ENDPOINTS,
    *raster_values.ENDPOINTS,
    *export.ENDPOINTS,
    *tile_cache.ENDPOINTS,
    *seeds.ENDPOINTS,
    *vector.ENDPOINTS,
    *watch.ENDPOINTS,
    *ogc.ENDPOINTS,
    *ogc_features.ENDPOINTS,
    *ogc_tiles.ENDPOINTS,
    *wmts.ENDPOINTS,
    *wms.ENDPOINTS,
    *pdf.ENDPOINTS,
    *providers.ENDPOINTS,
    *auth.ENDPOINTS,
    *admin.ENDPOINTS,
    *metrics.ENDPOINTS,
]
#: the endpoints under each mount (the OpenAPI document's)
MOUNTED: list[Endpoint] = [e for e in ENDPOINTS if e.place != "root"]
#: the routes under each mount
ROUTES: list[BaseRoute] = list(routes(ENDPOINTS, root=False))
#: the routes at the root: OAuth 2.0 with the login, the front door and ``/metrics``, and the
#: web pages with their files
ROOT_ROUTES: list[BaseRoute] = list(routes(ENDPOINTS, root=True))
