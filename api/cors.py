"""CORS for browsers on other sites: web maps fetch our tiles, TileJSON and GeoJSON.

Starlette's ``CORSMiddleware`` with the origins of ``MAPSVC_CORS_ORIGINS`` (default ``*``, as
TiTiler, Martin and tipg answer). Credentials (cookies) are allowed only with an explicit list of
origins, never with ``*``; an ``Authorization`` header needs no credentials mode, and its
preflight is answered either way. ``gis-url-proxy`` keeps its own rule
(``MAPSVC_PROXY_CORS_ORIGINS``, `api.routes.providers.ProxyHeadersMiddleware`): its requests
pass this middleware untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from api.mounts import USER_PREFIX, V1_PREFIX
from shared.settings import Settings

__all__ = [
    "ALLOW_HEADERS",
    "ALLOW_METHODS",
    "EXPOSE_HEADERS",
    "OWN_CORS_PATHS",
    "ApiCorsMiddleware",
    "cors_middleware",
]

ALLOW_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS")
#: request headers a page may send (besides the CORS-safelisted ones)
ALLOW_HEADERS = ("Authorization", "Content-Type", "Last-Event-ID", "If-None-Match")
#: answer headers a page may read (besides the CORS-safelisted ones)
EXPOSE_HEADERS = (
    "ETag",
    "X-Cache",
    "X-Tile-Empty",
    "X-Job-ID",
    "X-Request-ID",
    "Location",
    "Retry-After",
    "RateLimit-Limit",
    "RateLimit-Remaining",
    "RateLimit-Reset",
    "WWW-Authenticate",  # why a 401: e.g. ``invalid_token``, time to refresh
    "Content-Disposition",  # pdf-merge's file name
    "X-Page-Count",
)
#: routes that set their own CORS headers: this middleware leaves them alone
OWN_CORS_PATHS = frozenset(prefix + "/gis-url-proxy" for prefix in (USER_PREFIX, V1_PREFIX))
#: how long a browser may keep a preflight's answer
MAX_AGE_S = 600


class ApiCorsMiddleware:
    """Starlette's ``CORSMiddleware`` for every route but those of `OWN_CORS_PATHS`."""

    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        self.app = app
        explicit = [origin.rstrip("/") for origin in origins if origin != "*"]
        any_origin = "*" in origins
        self.cors = CORSMiddleware(
            app,
            allow_origins=["*"] if any_origin else explicit,
            allow_methods=ALLOW_METHODS,
            allow_headers=ALLOW_HEADERS,
            # with `*` a browser refuses credentials anyway; never echo every origin to allow them
            allow_credentials=bool(explicit) and not any_origin,
            expose_headers=EXPOSE_HEADERS,
            max_age=MAX_AGE_S,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: D102
        if scope["type"] != "http" or _route_path(scope) in OWN_CORS_PATHS:
            await self.app(scope, receive, send)
            return
        await self.cors(scope, receive, send)


def _route_path(scope: Scope) -> str:
    """The request's path below the app's root path (as the router matches it)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def cors_middleware(settings: Settings) -> Middleware:
    """The app's CORS middleware, its origins from ``settings.auth.cors_origins``."""
    return Middleware(ApiCorsMiddleware, origins=tuple(settings.auth.cors_origins))
