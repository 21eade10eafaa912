"""Links in answers: relative, or under the configured public URL; never from the ``Host`` header.

An answer that is cached (or shared by a proxy) must not hold a host a client chose, so
:func:`link` makes a relative link (``/api-user/…``) unless ``MAPSVC_PUBLIC_URL`` is set.
Where a client needs an absolute URL (TileJSON ``tiles``), :func:`absolute_url` takes the
public URL, else the request's own host, which ``TrustedHostMiddleware`` has checked; an
answer holding it is never cached.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from urllib.parse import quote, urlencode

from pydantic import BaseModel
from starlette.requests import Request
from starlette.routing import Mount, Route

from api.services import services

#: where :func:`keyed_url` notes, in the ASGI scope, that the answer holds the caller's key
KEYED_KEY = "mapsvc.keyed"

__all__ = [
    "absolute_url",
    "api_prefix",
    "job_links",
    "keyed_link",
    "KEYED_KEY",
    "keyed_url",
    "link",
    "route_path",
    "tile_template",
]


def _mount(request: Request) -> Mount:
    """The mount (``/api-user`` or ``/api/v1``) the request came in through."""
    mounts = [route for route in request.app.routes if isinstance(route, Mount)]
    for mount in mounts:
        if request.url.path.startswith(mount.path + "/"):
            return mount
    return mounts[0]  # a request outside every mount links under the first


def api_prefix(request: Request) -> str:
    """The prefix the request came in through: ``/api/v1`` or ``/api-user``."""
    return _mount(request).path


def route_path(request: Request, name: str, **path_params: str) -> str:
    """The path of route ``name`` (``get_job``) under the mount the request came in through.

    The route is found by its name in a table of the mount's routes (Starlette's
    ``url_path_for`` tries every route: 0.2 ms a link, a capabilities document has hundreds).

    Raises:
        KeyError: no route of that name.
        NoMatchFound: not the route's parameters.
    """
    mount, state = _mount(request), request.app.state
    try:
        tables: dict[str, dict[str, Route]] = state.named_routes
    except AttributeError:  # the app's first link
        mounts = [m for m in request.app.routes if isinstance(m, Mount)]
        tables = state.named_routes = {
            m.path: {r.name: r for r in m.routes if isinstance(r, Route)} for m in mounts
        }
    return mount.path + str(tables[mount.path][name].url_path_for(name, **path_params))


def job_links(request: Request, job_id: str) -> dict[str, str]:
    """The links of a job descriptor: itself and its event stream."""
    return {
        "self": link(request, route_path(request, "get_job", job_id=job_id)),
        "events": link(request, route_path(request, "get_job_events", job_id=job_id)),
    }


def _path_and_query(path: str, params: Sequence[tuple[str, str]]) -> str:
    query = urlencode(params, safe=",")
    # braces stay readable: they are the placeholders of URL templates ({z}/{x}/{y}); so does
    # the @ of a tile's @2x, which a path may hold (RFC 3986, pchar)
    return quote(path, safe="/{}@") + (f"?{query}" if query else "")


def link(request: Request, path: str, params: Sequence[tuple[str, str]] = ()) -> str:
    """A link to ``path`` (from ``/``) with the query ``params``, fit for a cached answer.

    Args:
        request: the request being answered (for the settings only).
        path: the path, e.g. ``/api-user/geojson/public.countries``.
        params: the query parameters, in order.

    Returns:
        ``<MAPSVC_PUBLIC_URL><path>?<query>``, or ``<path>?<query>`` when no public URL is set.
    """
    settings = services(request).settings
    return settings.public_url.rstrip("/") + _path_and_query(path, params)


def absolute_url(request: Request, path: str, params: Sequence[tuple[str, str]] = ()) -> str:
    """An absolute URL of ``path``, for answers that must hold one; never cache such an answer.

    Returns:
        Under ``MAPSVC_PUBLIC_URL`` when set, else under the request's scheme and host.
    """
    settings = services(request).settings
    base = settings.public_url.rstrip("/") or f"{request.url.scheme}://{request.url.netloc}"
    return base + _path_and_query(path, params)


def keyed_url(request: Request, path: str, params: Sequence[tuple[str, str]] = ()) -> str:
    """An absolute URL of ``path`` that a client which followed it asks as it asked
    ``request``: ``api_key=<key>`` added when the request carried its credential as ``api_key``.

    A client that reads a document with a key in its URL (a TileJSON, OGC API links, WMS and
    WMTS capabilities) asks what it points at the same way; a credential sent in the
    ``Authorization`` header is never put in a URL: the client sends its header again. Never
    cache an answer holding one (:func:`absolute_url`).
    """
    key = request.query_params.get("api_key")  # the one credential: api.authn checked it
    if not key:
        return absolute_url(request, path, params)
    request.scope[KEYED_KEY] = True  # the answer holds the key: api.endpoint says no-store
    return absolute_url(request, path, [*params, ("api_key", key)])


def keyed_link(
    request: Request,
    rel: str,
    path: str,
    media: str,
    title: str,
    params: Sequence[tuple[str, str]] = (),
) -> dict[str, str]:
    """A link object (OGC API's: ``rel``, ``type``, ``title``, ``href``) to ``path``, its
    ``href`` a :func:`keyed_url` (with ``params``)."""
    return {"rel": rel, "type": media, "title": title, "href": keyed_url(request, path, params)}


def tile_template(
    request: Request,
    path: str,
    query: BaseModel | None = None,
    carried: Iterable[str] = (),
    params: Sequence[tuple[str, str]] = (),
) -> str:
    """The absolute URL template of the tiles at ``path`` (``{z}/{x}/{y}`` kept), for a
    TileJSON: each tile asked through it is asked as the TileJSON was (:func:`keyed_url`).

    Args:
        request: the TileJSON's request.
        path: the tiles' path, from ``/``, with its placeholders.
        query: the TileJSON's parsed parameters.
        carried: the parameters of ``query`` that shape the tiles (``props``, ``filter``):
            those given are carried, as parsed; nothing else of the request is.
        params: more parameters carried, as they are (a raster's canonical rendering).
    """
    given = ((name, getattr(query, name)) for name in carried)
    pairs = [(name, str(value)) for name, value in given if value is not None]
    return keyed_url(request, path, [*pairs, *params])
