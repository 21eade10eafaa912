"""Authorisation: what a route needs (docs/auth.md "Roles and public layers").

Every endpoint declares its :class:`Rule` (``api.endpoint.Endpoint.rule``): the least role,
every parameter of the route that names a layer (by name: path or query, each value checked),
and whether anonymous callers may read public layers there. The order of refusals keeps the
existence of layers private: no credentials ``401``; a layer the principal may not see ``404``;
a role too low ``403``. How each parameter names its layer is in :data:`LAYER_PARAMETERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

from starlette.requests import Request

from api.scope import principal_of
from api.services import settings_of
from shared.auth.principal import Role
from shared.errors import ForbiddenError, InvalidInputError, NotFoundError, UnauthorizedError
from shared.raster.paths import decode_id, encode_id, file_of_layer, normalise_path
from shared.settings import Settings

__all__ = [
    "LAYER_PARAMETERS",
    "Rule",
    "Sight",
    "is_public",
    "visible_layers",
]


def is_public(settings: Settings, layer: str) -> bool:
    """Whether ``layer``'s read routes answer without credentials (``MAPSVC_PUBLIC_LAYERS``)."""
    public = settings.auth.public_layers
    return "*" in public or layer in public


@dataclass(frozen=True)
class Sight:
    """The layers a request may see: every layer (``names`` None), or those named."""

    names: frozenset[str] | None

    @classmethod
    def of(cls, request: Request, *, public: bool = True) -> Sight:
        """What the request's principal sees: its layers, and with ``public`` the public ones."""
        layers, shown = principal_of(request).layers, settings_of(request).auth.public_layers
        if layers is None or (public and "*" in shown):
            return cls(None)
        return cls(layers | frozenset(shown) if public else layers)

    def sees(self, layer: str) -> bool:
        """Whether the layer with id ``layer`` is seen."""
        return self.names is None or layer in self.names

    def check(self, layer: str) -> str:
        """``layer``, when it is seen.

        Raises:
            NotFoundError: it is not (the message does not name it: it does not exist here).
        """
        if not self.sees(layer):
            raise NotFoundError("no such layer")
        return layer

    def leads_to(self, folder: str) -> bool:
        """Whether the raster folder ``folder`` holds a raster layer seen, at any depth."""
        return self.names is None or any(
            path.startswith(f"{folder}/") for path in self.raster_paths
        )

    def sees_folder(self, folder: str) -> bool:
        """Whether the raster folder ``folder`` is the raster root, or is, holds or lies in a
        raster layer seen."""
        if self.names is None or not folder.rstrip("/"):  # the root (as the listing reads it)
            return True
        folder = normalise_path(folder)
        return self.leads_to(folder) or any(
            folder == path or folder.startswith(f"{path}/") for path in self.raster_paths
        )

    @cached_property
    def raster_paths(self) -> list[str]:
        """The raster paths of the layers seen by name (the others are vector layers)."""
        paths = []
        for name in self.names or ():
            try:
                paths.append(decode_id(name))
            except InvalidInputError:
                continue
        return paths


def visible_layers(request: Request, layers: Sequence[str]) -> list[str]:
    """Those of ``layers`` the request's principal may see (listings show only those)."""
    sight = Sight.of(request)
    return [layer for layer in layers if sight.sees(layer)]


def _layer(request: Request, value: str, sight: Sight) -> str:
    """A layer id: a raster layer's (its style), a vector layer's."""
    return sight.check(value)


def _layer_list(request: Request, value: str, sight: Sight) -> str | None:
    """Layer ids separated by ``,`` (WMS ``LAYERS``): the first, once every one is seen."""
    named = [sight.check(name) for name in value.split(",") if name]
    return named[0] if named else None


def _raster_path(request: Request, value: str, sight: Sight) -> str:
    """A raster path (``gis-raster/{path}``): the layer is the id of its normal form."""
    return sight.check(encode_id(normalise_path(value)))


def _layer_file(request: Request, value: str, sight: Sight) -> str:
    """A raster file of the layer the path's ``id`` names: that layer; another file is ``404``
    (:func:`~shared.raster.paths.file_of_layer`)."""
    layer = sight.check(request.path_params["id"])
    file_of_layer(decode_id(layer), value)
    return layer


def _raster_folder(request: Request, value: str, sight: Sight) -> None:
    """A raster folder (``gis-raster?folder=``): seen when it is, holds or lies in a layer seen;
    a folder is no layer (None)."""
    if not sight.sees_folder(value):
        raise NotFoundError("no such folder")


#: how a parameter names a layer, by its name (a rule names the parameters of its route that
#: do): the layer id it names (None for a folder), once ``sight`` sees it; ``404`` otherwise
LAYER_PARAMETERS: dict[str, Callable[[Request, str, Sight], str | None]] = {
    "id": _layer,
    "style": _layer,
    "layer": _layer,
    "coverage_layer": _layer,  # a pre-tiling run's coverage: a vector layer
    "collectionId": _layer,  # OGC API
    "LAYER": _layer,  # WMTS (KVP names upper-cased: api.ows)
    "LAYERS": _layer_list,  # WMS
    "QUERY_LAYERS": _layer_list,
    "path": _raster_path,
    "file": _layer_file,
    "folder": _raster_folder,
}


def _values(request: Request, name: str) -> list[str]:
    """Every value of parameter ``name``: the path's, then each non-empty one of the query."""
    path = [str(request.path_params[name])] if name in request.path_params else []
    return path + [value for value in request.query_params.getlist(name) if value]


def _credentials_needed() -> UnauthorizedError:
    return UnauthorizedError("credentials are needed: an API key, a token or a login")


@dataclass(frozen=True)
class Rule:
    """What a route needs.

    Attributes:
        role: the least role; None: anyone, with credentials or without.
        layers: the names of the parameters (path or query) that name a layer, a raster, a
            file or a folder (see :data:`LAYER_PARAMETERS`); every value given is checked.
        public: anonymous callers may use the route on public layers (with no role: the answer
            shows anonymous callers the public layers, others what they may see).
        every_layer: the route shows every layer's doings (the stream of all jobs, the
            metrics): a caller limited to layers is refused (``403``).
    """

    role: Role | None
    layers: tuple[str, ...] = ()
    public: bool = False
    every_layer: bool = False

    def __post_init__(self) -> None:
        unknown = set(self.layers) - set(LAYER_PARAMETERS)
        if unknown:
            raise ValueError(f"no way to read a layer from parameters {sorted(unknown)}")

    def check(self, request: Request) -> str | None:
        """Refuse the request unless its principal may do this; the layer it names, if any.

        Raises:
            UnauthorizedError: no credentials (401).
            NotFoundError: a layer, file or folder the principal may not see (404, as if it
                did not exist).
            ForbiddenError: a role too low, or a limit to layers where every layer shows (403).
        """
        principal = principal_of(request)
        needs_credentials = self.role is not None and principal.anonymous
        if needs_credentials and not self.public:
            raise _credentials_needed()
        try:
            layer = (
                self._named(request, Sight.of(request, public=self.public)) if self.layers else None
            )
        except NotFoundError:
            if needs_credentials:  # not a public layer: credentials might show it
                raise _credentials_needed() from None
            raise
        if self.role is None:
            return layer
        if principal.anonymous:
            if layer is None:  # a public route, but no public layer named
                raise _credentials_needed()
            return layer
        if not principal.has(self.role):
            raise ForbiddenError(f"this needs the {self.role} role", role=self.role)
        if self.every_layer and principal.layers is not None:
            raise ForbiddenError(
                "this shows every layer: it is for callers not limited to some layers"
            )
        return layer

    def _named(self, request: Request, sight: Sight) -> str | None:
        """The first layer the request's parameters name, each of them checked against
        ``sight`` (None: they name none).

        Raises:
            NotFoundError: one names what ``sight`` does not see (``detail.parameter`` names it).
        """
        named = []
        for name in self.layers:
            for value in _values(request, name):
                try:
                    named.append(LAYER_PARAMETERS[name](request, value, sight))
                except NotFoundError as exc:
                    exc.detail.setdefault("parameter", name)
                    raise
        return next((layer for layer in named if layer is not None), None)
