"""The routes of the API, mounted under ``/api-user`` and again under ``/api/v1``."""

from __future__ import annotations

from starlette.routing import BaseRoute

from api.routes import jobs, pdf, providers, raster, system, tiles, vector

__all__ = ["ROUTES"]

ROUTES: list[BaseRoute] = [
    *system.ROUTES,
    *jobs.ROUTES,
    *raster.ROUTES,
    *tiles.ROUTES,
    *vector.ROUTES,
    *pdf.ROUTES,
    *providers.ROUTES,
]
