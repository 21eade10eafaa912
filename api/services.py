"""The services of an API process (built by the lifespan) and the one way handlers reach them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import HTTPConnection

# types only: the services are built above every module that reaches them (api.jobs answers
# through api.links and api.endpoint, which call `services`)
if TYPE_CHECKING:
    import httpx
    import redis
    import redis.asyncio as aioredis
    from celery import Celery
    from sqlalchemy.ext.asyncio import AsyncEngine

    from api.documents import Documents
    from api.jobs import JobService
    from api.quotas import Budgets
    from api.shares import DatabaseShares
    from shared.auth.authenticator import Authenticator
    from shared.convert.client import ConvertClient
    from shared.providers.dem import DemCatalog
    from shared.providers.proxy import ProxyPolicy
    from shared.providers.upstream import Upstream
    from shared.raster.store import RasterStore
    from shared.settings import Settings
    from shared.tiles.pool import RenderPool
    from shared.tiles.service import TileService
    from shared.tiles.stores import TileStores
    from shared.vector.cache import VectorCache
    from shared.vector.catalog import Catalogue

__all__ = ["Services", "services", "settings_of"]


@dataclass(frozen=True)
class Services:
    """What the handlers of one API process share: settings, clients, pools, caches."""

    settings: Settings
    redis: redis.Redis
    aredis: aioredis.Redis
    db: AsyncEngine
    ready_db: AsyncEngine
    """``/ready``'s own connection."""
    vector: Catalogue
    vector_cache: VectorCache
    celery: Celery
    jobs: JobService
    convert: ConvertClient | None
    """None when the Convert server's address is not configured."""
    render_pool: RenderPool
    tiles: TileService
    tile_stores: TileStores
    rasters: RasterStore
    """Where the source rasters are read from (``MAPSVC_RASTER_STORE``)."""
    http: httpx.AsyncClient
    """The one provider client of the process."""
    upstream: Upstream
    dem: DemCatalog
    """Local elevation (``height``)."""
    proxy_http: httpx.AsyncClient
    """``gis-url-proxy``'s client: guarded connections."""
    proxy_policy: ProxyPolicy
    authenticator: Authenticator
    """Credentials to principals: API keys and logins (PostgreSQL), tokens (signing keys)."""
    budgets: Budgets
    """Each caller's requests per minute, per budget."""
    documents: Documents
    """The documents built once (the OpenAPI document of each mount)."""
    shares: DatabaseShares
    """Each caller's database slots."""
    front_vtiles: dict[str, Any]
    """Where the nginx front keeps vector tiles, and their paths' patterns
    (``api.front.front_vector_cache``): what truncation and expiry remove from it."""


def services(conn: HTTPConnection) -> Services:
    """The services of the process answering ``conn`` (a request, or any connection's scope)."""
    built: Services = conn.app.state.services
    return built


def settings_of(conn: HTTPConnection) -> Settings:
    """The settings of the app answering ``conn``: there before the lifespan runs (the OpenAPI
    document, the rules of routes), and the same object as ``services(conn).settings``."""
    found: Settings = conn.app.state.settings
    return found
