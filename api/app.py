"""The application factory: ``create_app(settings) -> Starlette``."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import sqlalchemy.exc
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount

from api.cors import cors_middleware
from api.documents import Documents
from api.errors import install_error_handlers
from api.front import front_vector_cache
from api.jobs import JobService, make_celery_client
from api.metrics import MetricsMiddleware
from api.middleware import AllowedHostsMiddleware, RequestIdMiddleware
from api.mounts import USER_PREFIX, V1_PREFIX
from api.openapi.conformance import AnswerCheck
from api.quotas import Budgets
from api.routes import ROOT_ROUTES, ROUTES
from api.services import Services
from api.shares import DatabaseShares
from shared import metrics
from shared.auth.authenticator import Authenticator, auth_engine
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
        async with AsyncExitStack() as stack:
            app.state.services = await _open_services(settings, stack)
            yield

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
            *([Middleware(AnswerCheck)] if settings.check_answers else []),
        ],
        lifespan=lifespan,
    )
    # the OpenAPI document is served without the lifespan: it needs the settings alone
    app.state.settings = settings
    install_error_handlers(app)
    return app


async def _open_services(settings: Settings, stack: AsyncExitStack) -> Services:
    """The services of the process, each close registered on ``stack`` as it opens (so they
    close in the reverse order, and those opened before a failure close too)."""
    stack.callback(metrics.mark_process_dead)  # the last thing the process does
    sync_redis = sync_client(settings.redis_url)
    stack.callback(sync_redis.close)
    aredis = async_client(settings.redis_url)
    stack.push_async_callback(aredis.aclose)
    auth_db = auth_engine(settings)
    stack.callback(auth_db.dispose)
    try:
        await asyncio.to_thread(upgrade, settings.database_url)
    except sqlalchemy.exc.OperationalError as exc:  # answers 503 until PostgreSQL is back
        log.warning("auth tables not migrated, PostgreSQL is unreachable: %s", exc.orig)
    ready_db = make_engine(settings, connections=1)
    stack.push_async_callback(ready_db.dispose)
    db = make_engine(settings)
    stack.push_async_callback(db.dispose)
    celery = make_celery_client(settings)
    stack.callback(celery.close)
    jobs = JobService(settings, JobStore(sync_redis, settings), aredis, celery)
    stack.push_async_callback(jobs.aclose)
    convert = convert_client(settings)
    if convert is not None:
        stack.push_async_callback(convert.close)
    rasters = raster_store(settings)
    stack.callback(rasters.close)
    stores = tile_stores(settings)
    stack.callback(stores.close)
    render_pool = _render_pool(settings)
    stack.callback(render_pool.close)
    proxy_http = make_proxy_client(settings)
    stack.push_async_callback(proxy_http.aclose)
    dem = DemCatalog(settings.dirs.dem)
    stack.callback(dem.close)
    http = make_http_client(settings)
    stack.push_async_callback(http.aclose)
    if settings.tiles.render_warm_up:
        # in the background: the API answers at once, the first renders find Mapnik loaded
        warming = asyncio.create_task(render_pool.warm_up())
        stack.callback(warming.cancel)
    return Services(
        settings=settings,
        redis=sync_redis,
        aredis=aredis,
        db=db,
        ready_db=ready_db,
        vector=Catalogue(
            list(settings.vector.schemas),
            settings.vector.config,
            settings.vector.catalog_ttl_s,
        ),
        vector_cache=VectorCache(
            aredis, settings.vector.vtile_cache_ttl_s, settings.vector.cache_max_bytes
        ),
        celery=celery,
        jobs=jobs,
        convert=convert,
        render_pool=render_pool,
        tiles=TileService(settings.dirs.mapnik, render_pool, count_zoom=settings.metrics.tile_zoom),
        tile_stores=stores,
        rasters=rasters,
        http=http,
        upstream=Upstream.from_settings(http, aredis, settings),
        dem=dem,
        proxy_http=proxy_http,
        proxy_policy=ProxyPolicy.from_settings(settings),
        authenticator=Authenticator(settings.auth, auth_db, aredis, signing_keys(settings)),
        budgets=Budgets(settings.auth, aredis),
        documents=Documents(),
        shares=DatabaseShares(settings.db_statements_per_caller),
        front_vtiles=front_vector_cache(settings),
    )


def _render_pool(settings: Settings) -> RenderPool:
    """The pool of Mapnik render processes (``MAPSVC_RENDER_*``)."""
    return RenderPool(
        settings.dirs.mapnik,
        settings.tiles.render_processes or os.cpu_count() or 1,
        limits=RenderLimits(
            settings.tiles.render_queue_max,
            settings.tiles.render_max_large,
            settings.tiles.render_timeout_s,
        ),
    )
