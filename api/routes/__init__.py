"""The routes of the API, mounted under ``/api-user`` and again under ``/api/v1``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from api import metrics
from api.access import guarded
from api.links import api_prefix
from api.openapi import openapi_document
from api.routes import admin, auth, jobs, pdf, providers, raster, system, tiles, vector, web

__all__ = ["ROOT_ROUTES", "ROUTES"]


async def get_openapi(request: Request) -> JSONResponse:
    """The OpenAPI 3.1 document of every route, its server the mount it was asked through."""
    return JSONResponse(openapi_document(ROUTES, request.app.state.settings, api_prefix(request)))


#: the routes under each mount, each behind its rule (``api.access.RULES``)
ROUTES: list[BaseRoute] = guarded(
    [
        *web.ROUTES,
        *system.ROUTES,
        Route("/openapi.json", get_openapi, methods=["GET"], name="get_openapi"),
        *jobs.ROUTES,
        *raster.ROUTES,
        *tiles.ROUTES,
        *vector.ROUTES,
        *pdf.ROUTES,
        *providers.ROUTES,
        *auth.ROUTES,
        *admin.ROUTES,
        *metrics.ROUTES,
    ]
)
#: the routes at the root: OAuth 2.0 with the login, the front door and ``/metrics`` (the same
#: route objects as under each mount, guarded above), and the web pages with their files
ROOT_ROUTES: list[BaseRoute] = [
    *auth.ROUTES,
    *web.ROUTES,
    *metrics.ROUTES,
    *guarded(web.PAGE_ROUTES),
]
