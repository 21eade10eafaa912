"""What the wrapper and the middleware leave in a request's ASGI scope for later steps: the
caller's principal and the layer its route's rule read."""

from __future__ import annotations

from starlette.requests import Request

from shared.auth.principal import ANONYMOUS, Principal

__all__ = ["LAYER_KEY", "PRINCIPAL_KEY", "layer_of", "principal_of"]

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
