"""The application factory: ``create_app(settings) -> Starlette``."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import sqlalchemy.exc
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount

from api.authn import AuthenticationMiddleware, Authenticator, auth_engine
from api.cors import cors_middleware
from api.errors import install_error_handlers
from api.jobs import JobService, make_celery_client
from api.metrics import MetricsMiddleware
from api.middleware import AllowedHostsMiddleware, RequestIdMiddleware
from api.mounts import USER_PREFIX, V1_PREFIX
from api.quotas import QuotaMiddleware
from api.routes import ROOT_ROUTES, ROUTES
from api.services import Services
from shared import metrics
from shared.auth.migrate import upgrade
from shared.auth.tokens import signing_keys
from shared.convert.client import convert_client
from shared.jobs import JobStore
from shared.logs import configure_logging
from shared.providers.dem import DemCatalog
from shared.providers.proxy import ProxyPolicy, make_proxy_client
from shared.providers.upstream import Upstream, make_http_client
from shared.raster.store import raster_store, set_gdal_environment
from shared.redis_clients import async_client, sync_client
from shared.settings import Settings
from shared.tiles.pool import RenderLimits, RenderPool
from shared.tiles.service import TileService
from shared.tiles.stores import tile_stores
from shared.vector.cache import VectorCache
from shared.vector.catalog import Catalogue
from shared.vector.db import make_engine

__all__ = ["create_app"]

log = logging.getLogger("mapsvc.api")


def create_app(settings: Settings | None = None) -> Starlette:
    """Build the API; its routes live under ``/api-user`` and again under ``/api/v1``.

    Args:
        settings: the settings to run with; read from the environment when None.
    """
    settings = settings or Settings()
    settings.ensure_work_dir()
    configure_logging(settings.log_level, settings.log_format)
    # GDAL reads a raster bucket with the AWS_* options of the process's environment
    set_gdal_environment(settings, os.environ)
    if not metrics.exported(settings):
        log.warning(
            "this process's metrics are not in /metrics: %s is not %s/<host> (start the API"
            " with `mapsvc serve` or `mapsvc up`)",
            metrics.ENV,
            metrics.metrics_root(settings),
        )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sync_redis = sync_client(settings.redis_url)
        aredis = async_client(settings.redis_url)
        celery = make_celery_client(settings)
        mapnik_dir = settings.dirs.mapnik
        render_pool = RenderPool(
            mapnik_dir,
            settings.tiles.render_processes or os.cpu_count() or 1,
            limits=RenderLimits(
                settings.tiles.render_queue_max,
                settings.tiles.render_max_large,
                settings.tiles.render_timeout_s,
            ),
        )
        http = make_http_client(settings)
        auth_db = auth_engine(settings)
        try:
            await asyncio.to_thread(upgrade, settings.database_url)
        except sqlalchemy.exc.OperationalError as exc:  # answers 503 until PostgreSQL is back
            log.warning("auth tables not migrated, PostgreSQL is unreachable: %s", exc.orig)
        built = Services(
            settings=settings,
            redis=sync_redis,
            aredis=aredis,
            db=make_engine(settings),
            ready_db=make_engine(settings, connections=1),
            vector=Catalogue(
                list(settings.vector.vector_schemas),
                settings.vector.vector_config,
                settings.vector.vector_catalog_ttl_s,
            ),
            vector_cache=VectorCache(
                aredis, settings.vector.vtile_cache_ttl_s, settings.vector.vector_cache_max_bytes
            ),
            celery=celery,
            jobs=JobService(settings, JobStore(sync_redis, settings), aredis, celery),
            convert=convert_client(settings),
            render_pool=render_pool,
            tiles=TileService(mapnik_dir, render_pool, count_zoom=settings.metrics.tile_zoom),
            tile_stores=tile_stores(settings),
            rasters=raster_store(settings),
            http=http,
            upstream=Upstream.from_settings(http, aredis, settings),
            dem=DemCatalog(settings.dirs.dem),
            proxy_http=make_proxy_client(settings),
            proxy_policy=ProxyPolicy.from_settings(settings),
            authenticator=Authenticator(settings, auth_db, aredis, signing_keys(settings)),
        )
        # in the background: the API answers at once, the first renders find Mapnik loaded
        warming = (
            asyncio.create_task(render_pool.warm_up()) if settings.tiles.render_warm_up else None
        )
        app.state.services = built
        try:
            yield
        finally:
            await built.http.aclose()
            built.dem.close()
            await built.proxy_http.aclose()
            if warming is not None:
                warming.cancel()
            built.render_pool.close()
            built.tile_stores.close()
            built.rasters.close()
            if built.convert is not None:
                await built.convert.close()
            built.celery.close()
            await built.jobs.aclose()
            await built.db.dispose()
            await built.ready_db.dispose()
            auth_db.dispose()
            await built.aredis.aclose()
            built.redis.close()
            metrics.mark_process_dead()

    app = Starlette(
        routes=[
            Mount(USER_PREFIX, routes=ROUTES, name="api-user"),
            Mount(V1_PREFIX, routes=ROUTES, name="api-v1"),
            *ROOT_ROUTES,
        ],
        middleware=[
            Middleware(MetricsMiddleware),  # outermost: every answer counted, refusals too
            Middleware(RequestIdMiddleware),
            cors_middleware(settings),  # outside Host check, auth, quotas: 400/401/429 readable
            Middleware(AllowedHostsMiddleware, allowed_hosts=settings.allowed_host_list),
            Middleware(AuthenticationMiddleware),
            Middleware(QuotaMiddleware, settings=settings.auth),
        ],
        lifespan=lifespan,
    )
    # the OpenAPI document is served without the lifespan: it needs the settings alone
    app.state.settings = settings
    install_error_handlers(app)
    return app
