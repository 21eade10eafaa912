"""The application factory: ``create_app(settings) -> Starlette``."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount

from api.errors import install_error_handlers
from api.jobs import JobService, make_celery_client
from api.middleware import AllowedHostsMiddleware, RequestIdMiddleware
from api.routes import ROUTES
from shared.convert.client import convert_client
from shared.jobs import JobStore
from shared.providers.dem import DemCatalog
from shared.providers.proxy import ProxyPolicy, make_proxy_client
from shared.providers.upstream import Upstream, make_http_client
from shared.redis_clients import async_client, sync_client
from shared.settings import Settings
from shared.tiles.pool import RenderLimits, RenderPool
from shared.tiles.service import TileService
from shared.tiles.stores import tile_stores
from shared.vector.cache import VectorCache
from shared.vector.catalog import Catalogue
from shared.vector.db import make_engine

__all__ = ["create_app"]


def create_app(settings: Settings | None = None) -> Starlette:
    """Build the API; its routes live under ``/api-user`` and again under ``/api/v1``.

    Args:
        settings: the settings to run with; read from the environment when None.
    """
    settings = settings or Settings()
    settings.ensure_work_dir()
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state = app.state
        state.redis = sync_client(settings.redis_url)
        state.aredis = async_client(settings.redis_url)
        state.db = make_engine(settings)
        state.ready_db = make_engine(settings, connections=1)  # /ready's own connection
        state.vector = Catalogue(
            [name.strip() for name in settings.vector_schemas.split(",") if name.strip()],
            settings.vector_config,
            settings.vector_catalog_ttl_s,
        )
        state.vector_cache = VectorCache(
            state.aredis, settings.vtile_cache_ttl_s, settings.vector_cache_max_bytes
        )
        state.celery = make_celery_client(settings)
        state.jobs = JobService(
            settings, JobStore(state.redis, settings), state.aredis, state.celery
        )
        state.convert = convert_client(settings)  # None when the address is not configured
        mapnik_dir = settings.work_dir / "map" / "mapnik"
        state.render_pool = RenderPool(
            mapnik_dir,
            settings.render_processes or os.cpu_count() or 1,
            limits=RenderLimits(
                settings.render_queue_max, settings.render_max_large, settings.render_timeout_s
            ),
        )
        state.tiles = TileService(mapnik_dir, state.render_pool)
        # in the background: the API answers at once, the first renders find Mapnik loaded
        warming = (
            asyncio.create_task(state.render_pool.warm_up()) if settings.render_warm_up else None
        )
        state.tile_stores = tile_stores(settings)
        state.http = make_http_client(settings)  # the one provider client of the process
        state.upstream = Upstream.from_settings(state.http, state.aredis, settings)
        state.dem = DemCatalog(settings.work_dir / "map" / "dem")  # local elevation (height)
        state.proxy_http = make_proxy_client(settings)  # gis-url-proxy: guarded connections
        state.proxy_policy = ProxyPolicy.from_settings(settings)
        try:
            yield
        finally:
            await state.http.aclose()
            state.dem.close()
            await state.proxy_http.aclose()
            if warming is not None:
                warming.cancel()
            state.render_pool.close()
            state.tile_stores.close()
            if state.convert is not None:
                await state.convert.close()
            state.celery.close()
            await state.jobs.aclose()
            await state.db.dispose()
            await state.ready_db.dispose()
            await state.aredis.aclose()
            state.redis.close()

    app = Starlette(
        routes=[
            Mount("/api-user", routes=ROUTES, name="api-user"),
            Mount("/api/v1", routes=ROUTES, name="api-v1"),
        ],
        middleware=[
            Middleware(RequestIdMiddleware),
            Middleware(AllowedHostsMiddleware, allowed_hosts=settings.allowed_host_list),
        ],
        lifespan=lifespan,
    )
    app.state.settings = settings
    install_error_handlers(app)
    return app
