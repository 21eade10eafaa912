"""One declaration per route: :class:`Endpoint` (docs/layout.md "Adding a route").

An endpoint names its method, path and handler, and every fact about it that is not the
handler's own work: who may call it and which parameters name a layer (``rule``), the budget it
spends (``budget``), its parameters (``query``, a
:class:`~api.fields.Query` model) and body (``body``), what it answers (``answer``), the errors
it documents and the job it starts. From the list of endpoints come, never written again: the
routes of both mounts and the root (:func:`routes`), the OpenAPI document
(``api.openapi.document``), and the nginx front's locations (``api.front``).

Each request of an endpoint goes through one wrapper (:meth:`Endpoint.answer`): credentials →
rule → budget → parameters → ``handler(request[, query][, body][, layer=])``. A query parameter
the endpoint does not define is a ``400`` (:func:`api.fields.refuse_unknown`). An endpoint that
declares what its layer ``resolves`` to gets it read by the wrapper (the layer its rule checked,
``404`` when there is none), and handed to the handler as ``layer``. The handler of an
endpoint that declares a ``job`` answers a :class:`~api.job_reply.JobStart`: the wrapper starts
that job and replies (:func:`api.job_reply.reply`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from api.access import Rule, is_public
from api.authn import identify
from api.bodies import FORM_MAX_BYTES, capped
from api.errors import error_for
from api.fields import JobQuery, Query, parse, refuse_unknown
from api.job_reply import JobStart, reply
from api.layers import LayerKind, resolve_layer
from api.links import KEYED_KEY
from api.quotas import Budget, caller_of
from api.scope import LAYER_KEY
from api.services import services, settings_of
from api.shares import Held, HeldWhileSent
from shared.errors import InvalidInputError, NotFoundError
from shared.queues import JobKind

__all__ = ["ENDPOINT_KEY", "Endpoint", "endpoint_of", "routes"]

#: where the wrapper leaves the request's endpoint in the ASGI scope
ENDPOINT_KEY = "mapsvc.endpoint"

Handler = Callable[..., Awaitable[Response | JobStart]]
Schema = dict[str, Any]
#: where an endpoint is routed: under both mounts, at the root too, or at the root only
Place = Literal["mounts", "mounts+root", "root"]


@dataclass(frozen=True)
class Endpoint:
    """One route, declared once.

    Attributes:
        method: the HTTP method (``GET`` answers ``HEAD`` too).
        path: the path under the mount, Starlette's syntax (``/rtile/{style}/{z}/{x}/{y}.png``).
        handler: ``handler(request)``, with ``query`` ``handler(request, query)``, with a
            ``body`` model ``handler(request, [query,] body)``; with ``resolves``, the layer
            too (``handler(…, layer=…)``).
        rule: who may call it, and the parameters that name a layer, file or folder.
        budget: the quota it spends (required: every route has one, anonymous callers' counted
            per address).
        query: its path and query parameters.
        body: its body: a model (JSON, or a form with ``body_media``), or a request body
            object of the document when the handler reads the body itself (files).
        body_media: the media type of a ``body`` model.
        body_optional: a request without a body (nothing sent, whatever its headers) is
            answered too: the handler gets None for the ``body`` model.
        answer: what it answers: a model (``200`` with that JSON), or response objects by
            status.
        errors: the error statuses it documents beyond those of its rule and budget.
        error_media: the media type of its error answers (OGC services answer XML, through
            their ``middleware``).
        job: the job it starts: its handler answers a :class:`~api.job_reply.JobStart`, and
            the endpoint the job's result, or ``202`` with the job.
        resolves: what the layer its rule reads is (``raster``: its
            :class:`~shared.tiles.styles.StyleInfo`, ``vector``: its
            :class:`~shared.vector.catalog.VectorLayer`, ``any``: either): the wrapper reads
            it for the handler (:func:`api.layers.resolve_layer`).
        tag: its group in the document.
        name: its route name (default: the handler's name).
        summary: its summary (default: the first line of the handler's docstring).
        headers: header parameters of the document (the handler reads them).
        database: its handler queries PostgreSQL: a request holds one of its caller's database
            slots (:mod:`api.shares`) until its answer is sent.
        ignores_unknown: the standard it follows says to ignore the query parameters it does not
            define (WMS, WMTS, OAuth 2.0); other endpoints refuse them (``400``).
        own_credentials: it reads credentials of its own (a login form, client credentials):
            no user authentication runs before it.
        middleware: middleware around it alone, outside the wrapper (its refusals pass it
            too).
        place: where it is routed.
        documented: whether the OpenAPI document lists it.
    """

    method: str
    path: str
    handler: Handler
    _: KW_ONLY
    rule: Rule
    budget: Budget
    query: type[Query] | None = None
    body: type[BaseModel] | Schema | None = None
    body_media: str = "application/json"
    body_optional: bool = False
    answer: type[BaseModel] | Mapping[str, Schema] | None = None
    errors: tuple[int, ...] = ()
    error_media: str = "application/json"
    job: JobKind[Any] | None = None
    resolves: LayerKind | None = None
    tag: str = ""
    name: str = ""
    summary: str = ""
    headers: tuple[Schema, ...] = ()
    database: bool = False
    ignores_unknown: bool = False
    own_credentials: bool = False
    middleware: tuple[Middleware, ...] = ()
    place: Place = "mounts"
    documented: bool = True
    _path_names: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = frozenset(re.findall(r"{(\w+)(?::\w+)?}", self.path))
        object.__setattr__(self, "_path_names", names)
        if not self.name:
            object.__setattr__(self, "name", self.handler.__name__)
        if not self.summary:
            first = (self.handler.__doc__ or "").strip().splitlines()
            object.__setattr__(self, "summary", first[0] if first else "")
        if self.resolves is not None and not self.rule.layers:
            raise ValueError(f"{self.name}: resolves a layer its rule does not read")
        fields = self.query.model_fields if self.query is not None else {}
        missing = names - {field.alias or name for name, field in fields.items()}
        if self.query is not None and missing:  # a path parameter its handler could not read
            raise ValueError(f"{self.name}: path parameters {sorted(missing)} are not in query")

    @property
    def path_names(self) -> frozenset[str]:
        """The names of the path's parameters."""
        return self._path_names

    def route(self) -> Route:
        """The Starlette route of this endpoint."""
        return Route(
            self.path,
            self.answer_to,
            methods=[self.method],
            name=self.name,
            middleware=self.middleware,
        )

    async def answer_to(self, request: Request) -> Response | HeldWhileSent:
        """The answer to one request: credentials → rule → budget → parameters → handler.

        Every failure after the budget keeps the budget's ``RateLimit-*`` headers. Whatever
        the handler said: an answer holding the caller's key (:data:`~api.links.KEYED_KEY`) is
        ``Cache-Control: no-store``, one about a layer that is not public ``private``.
        """
        scope = request.scope
        scope[ENDPOINT_KEY] = self
        if not self.own_credentials:
            refused = await identify(request)
            if refused is not None:
                return refused
        layer = self.rule.check(request)
        scope[LAYER_KEY] = layer
        svc = services(request)
        limits, refusal = await svc.budgets.spend(request, self.budget)
        if refusal is not None:
            return refusal
        held: Held | None = None
        try:
            if self.database:
                held = await svc.shares.take(caller_of(scope))
            arguments = await self._arguments(request)
            named = await self._resolved(request, layer, arguments)
            answer = await self.handler(request, *arguments, **named)
            if isinstance(answer, JobStart):
                assert self.job is not None, f"{self.name} declares no job"
                asked = arguments[0] if arguments else None
                run_async = isinstance(asked, JobQuery) and asked.run_async
                answer = await reply(request, self.job, answer, run_async=run_async)
            response = answer
        except BaseException as exc:  # the error's answer, with the budget's headers
            if held is not None:
                held.release()
                held = None
            if not isinstance(exc, Exception) or not limits:
                raise
            response = await error_for(request, exc)
        response.headers.update(limits)
        if scope.get(KEYED_KEY):
            response.headers["Cache-Control"] = "no-store"
        elif layer is not None and not is_public(settings_of(request), layer):
            response.headers["Cache-Control"] = _private(response.headers.get("cache-control"))
        return response if held is None else HeldWhileSent(response, held)

    async def _arguments(self, request: Request) -> list[Any]:
        """The handler's arguments after the request: its query, then its body."""
        arguments: list[Any] = []
        if not self.ignores_unknown:
            refuse_unknown(self.query, request.query_params, self.path_names)
        if self.query is not None:
            settings = settings_of(request)
            arguments.append(parse(self.query, request.path_params, request.query_params, settings))
        if isinstance(self.body, type):
            arguments.append(
                await _body(request, self.body, self.body_media, optional=self.body_optional)
            )
        return arguments

    async def _resolved(
        self, request: Request, layer: str | None, arguments: list[Any]
    ) -> dict[str, Any]:
        """The handler's ``layer`` argument, when it ``resolves`` the layer its rule read."""
        if self.resolves is None:
            return {}
        if layer is None:  # (the parameters are parsed: a required one is there)
            raise NotFoundError("no such layer")
        asked = arguments[0] if arguments else None
        again = isinstance(asked, Query) and asked.reads_catalogue_again
        try:
            return {"layer": await resolve_layer(request, self.resolves, layer, refresh=again)}
        except NotFoundError as exc:
            exc.detail.setdefault("parameter", self.rule.layers[0])
            raise


def _private(cache: str | None) -> str:
    """``cache`` (a ``Cache-Control`` value; None: none given) kept by no shared cache."""
    if not cache:
        return "private"
    if "no-store" in cache or "private" in cache:
        return cache
    if "public" in cache:
        return cache.replace("public", "private")
    return f"private, {cache}"


async def _body(
    request: Request, model: type[BaseModel], media: str, *, optional: bool = False
) -> BaseModel | None:
    """The request's body as ``model``: JSON, or a form (``media``), at most
    ``FORM_MAX_BYTES``; with ``optional``, None when nothing (or only white space) was sent,
    whatever the headers say.

    Raises:
        InvalidInputError: not the media type, not JSON, or a value the model refuses (400,
            ``detail.parameter`` names the field).
        PayloadTooLargeError: larger than the cap (413).
    """
    request = capped(request, FORM_MAX_BYTES, "a request body")
    if optional and not (await request.body()).strip():
        return None
    given = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if given != media:
        raise InvalidInputError(f"the body must be {media}", parameter="Content-Type")
    if media == "application/json":
        try:
            data = json.loads(await request.body() or b"null")
        except (ValueError, UnicodeDecodeError, RecursionError):  # (nested past Python's depth)
            raise InvalidInputError("the body is not JSON", parameter="body") from None
    else:
        form = await request.form()
        data = {name: value for name, value in form.items() if isinstance(value, str)}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        name = ".".join(str(part) for part in error["loc"]) or "body"
        raise InvalidInputError(f"{name}: {error['msg']}", parameter=name) from None


def endpoint_of(request: Request) -> Endpoint:
    """The endpoint answering ``request``."""
    found: Endpoint = request.scope[ENDPOINT_KEY]
    return found


def routes(endpoints: Iterable[Endpoint], *, root: bool) -> list[Route]:
    """The routes of ``endpoints`` under a mount (``root`` False) or at the root."""
    wanted = {"mounts+root", "root"} if root else {"mounts", "mounts+root"}
    return [endpoint.route() for endpoint in endpoints if endpoint.place in wanted]
