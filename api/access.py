"""Authorisation: what each route needs, in one table (docs/auth.md "Roles and public layers").

Every route of :data:`api.routes.ROUTES` has a :class:`Rule` in :data:`RULES` (a route without
one is refused when the app is built). A rule names the least role, the layer the route reads
or changes, and whether anonymous callers may read public layers there. The order of refusals
keeps the existence of layers private: no credentials ``401``; a layer the principal may not
see ``404``; a role too low ``403``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.auth.principal import ANONYMOUS, Principal, Role
from shared.errors import ForbiddenError, NotFoundError, UnauthorizedError
from shared.raster.paths import encode_id, normalise_path
from shared.settings import Settings

__all__ = [
    "LAYER_KEY",
    "PRINCIPAL_KEY",
    "RULES",
    "Rule",
    "guarded",
    "is_public",
    "layer_of",
    "principal_of",
    "visible_layers",
]

#: where the authentication middleware leaves the request's principal in the ASGI scope
PRINCIPAL_KEY = "mapsvc.principal"
#: where a route's rule leaves the layer the request names (for the jobs it starts)
LAYER_KEY = "mapsvc.layer"


def principal_of(request: Request) -> Principal:
    """The principal of a request (anonymous when no authentication ran)."""
    found: Principal = request.scope.get(PRINCIPAL_KEY, ANONYMOUS)
    return found


def layer_of(request: Request) -> str | None:
    """The layer the request names, as its route's rule read it (None: none)."""
    layer: str | None = request.scope.get(LAYER_KEY)
    return layer


def is_public(settings: Settings, layer: str) -> bool:
    """Whether ``layer``'s read routes answer without credentials (``MAPSVC_PUBLIC_LAYERS``)."""
    public = settings.auth.public_layers
    return "*" in public or layer in public


def visible_layers(request: Request, layers: Sequence[str]) -> list[str]:
    """Those of ``layers`` the request's principal may see (listings show only those)."""
    principal, settings = principal_of(request), request.app.state.settings
    return [layer for layer in layers if principal.sees(layer) or is_public(settings, layer)]


def _param(name: str) -> Callable[[Request], str]:
    return lambda request: str(request.path_params[name])


def _raster_path(request: Request) -> str:
    """The layer id of ``gis-raster/{path}``: the id of the normalised path."""
    return encode_id(normalise_path(request.path_params["path"]))


@dataclass(frozen=True)
class Rule:
    """What a route needs.

    Attributes:
        role: the least role; None: anyone, with credentials or without.
        layer: the layer the request names (read from it), when the route is about one.
        public: anonymous callers may use the route on public layers (with no role: the answer
            shows anonymous callers the public layers, others what they may see).
    """

    role: Role | None
    layer: Callable[[Request], str] | None = None
    public: bool = False

    def check(self, request: Request) -> str | None:
        """Refuse the request unless its principal may do this; the layer it names, if any.

        Raises:
            UnauthorizedError: no credentials (401).
            NotFoundError: a layer the principal may not see (404, as if it did not exist).
            ForbiddenError: a role too low (403).
        """
        if self.role is None:
            return None
        principal, settings = principal_of(request), request.app.state.settings
        layer = self.layer(request) if self.layer is not None else None
        public = self.public and layer is not None and is_public(settings, layer)
        if principal.anonymous:
            if public:
                return layer
            raise UnauthorizedError("credentials are needed: an API key, a token or a login")
        if layer is not None and not (public or principal.sees(layer)):
            raise NotFoundError(f"no layer {layer}", layer=layer)
        if not principal.has(self.role):
            raise ForbiddenError(f"this needs the {self.role} role", role=self.role)
        return layer


def _read(param: str) -> Rule:
    """Reading the layer named by path parameter ``param``: public layers need no credentials."""
    return Rule("reader", layer=_param(param), public=True)


#: the rule of every route, by route name
RULES: dict[str, Rule] = {
    # open to anyone
    "get_health": Rule(None),
    "get_ready": Rule(None),
    "get_openapi": Rule(None),
    "post_token": Rule(None),
    "get_authorize": Rule(None),
    "post_authorize": Rule(None),
    "post_login": Rule(None),
    # the web pages: open, each page asks for credentials itself (api.routes.web)
    "get_front": Rule(None),
    "get_viewer": Rule(None),
    "get_api_docs": Rule(None),
    "get_web_asset": Rule(None),
    # reading layers: public layers answer without credentials
    "get_tile": _read("style"),
    "get_tile_nolang": _read("style"),
    "get_tile_format": _read("style"),
    "get_tile_nolang_format": _read("style"),
    "get_tile_access": _read("style"),
    "get_vtile": _read("layer"),
    "get_geojson": _read("layer"),
    "get_datasource": _read("layer"),
    "list_datasources": Rule(None, public=True),  # anonymous callers: the public layers
    # reading data and calling providers
    "get_raster_list": Rule(None, public=True),  # anonymous callers: the public layers
    "get_raster_stat": Rule("reader", layer=_param("id")),
    "get_raster_info": Rule("reader", layer=_param("id")),
    "get_geocode": Rule("reader"),
    "get_reverse_geocode": Rule("reader"),
    "get_map_route": Rule("reader"),
    "get_weather": Rule("reader"),
    "get_height": Rule("reader"),
    "get_url_proxy": Rule("reader"),
    "get_parcel": Rule("reader"),
    "get_parcel_api": Rule("reader"),
    "post_pdf_merge": Rule("reader"),
    # a job's record and stream: its creator and operators (checked by the job service)
    "list_jobs": Rule("reader"),
    "get_job": Rule("reader"),
    "delete_job": Rule("reader"),
    "get_job_events": Rule("reader"),
    # starting jobs, changing layers and caches, every job's stream
    "get_raster_config": Rule("operator", layer=_raster_path),
    "get_layer_compress": Rule("operator", layer=_param("id")),
    "get_layer_pretile": Rule("operator", layer=_param("id")),
    "get_speed_test": Rule("operator"),
    "get_probe": Rule("operator"),
    "delete_vtile_cache": Rule("operator", layer=_param("layer")),
    "get_events": Rule("operator"),
    "get_metrics": Rule("operator"),  # /metrics, at the root (api.metrics)
    # users, keys, OAuth clients
    **{
        name: Rule("admin")
        for collection in ("users", "api_keys", "oauth_clients")
        for name in (
            f"list_{collection}",
            f"create_{collection}",
            f"get_{collection}",
            f"put_{collection}",
            f"delete_{collection}",
        )
    },
}


class _Guarded:
    """A route's app behind its rule; an answer about a layer that is not public is private."""

    def __init__(self, app: ASGIApp, rule: Rule) -> None:
        self.app = app
        self.rule = rule

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        layer = self.rule.check(request)
        scope[LAYER_KEY] = layer
        if layer is None or is_public(request.app.state.settings, layer):
            await self.app(scope, receive, send)
            return

        async def private(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                cache = headers.get("cache-control")
                if cache is not None:  # never kept by a shared cache
                    headers["Cache-Control"] = cache.replace("public", "private")
            await send(message)

        await self.app(scope, receive, private)


def guarded(routes: Sequence[BaseRoute]) -> list[BaseRoute]:
    """``routes``, each behind its rule (its middleware, if any, stays inside).

    Raises:
        KeyError: a route has no rule in :data:`RULES`.
    """
    for route in routes:
        assert isinstance(route, Route), route
        route.app = _Guarded(route.app, RULES[route.name])
    return list(routes)
