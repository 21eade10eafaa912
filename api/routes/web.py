"""The web pages: the front door (``/``), the map viewer (``/viewer``), the API docs (``/docs``).

The pages' sources are in ``api/web`` (npm, esbuild; docs/viewer.md "The viewer"); their build,
``api/web/dist``, is served from here with MapLibre GL JS and Swagger UI, never from a CDN.
The front door needs no build; without one the other pages answer ``503`` saying how to make
it, and the API runs on.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote, urlsplit

from pydantic import Field
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response

from api.access import Rule
from api.documents import not_modified
from api.endpoint import Endpoint, Handler
from api.fields import Query
from api.links import api_prefix
from api.openapi.models import FrontDoor, ref
from shared.errors import NotFoundError, UnavailableError
from shared.version import VERSION

__all__ = ["DIST", "ENDPOINTS", "wants_json"]

#: the build of ``api/web`` (``make web``); looked up on every request, so a build made while
#: the API runs is served at once
DIST = Path(__file__).resolve().parents[1] / "web" / "dist"
_BUILD = "make web (npm ci and the build in api/web; make setup runs it)"
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".map": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
#: the pages run our scripts and MapLibre's module worker only, and talk to this origin only
_CSP = (
    "default-src 'self'; script-src 'self'; worker-src 'self' blob:; img-src 'self' data: blob:;"
    " style-src 'self' 'unsafe-inline'; connect-src 'self'; object-src 'none';"
    " base-uri 'self'; frame-ancestors 'none'"
)
_PAGE_HEADERS = {"Content-Security-Policy": _CSP, "Cache-Control": "no-cache"}


@dataclass(frozen=True)
class _Link:
    """A link of the front door."""

    rel: str
    href: str
    type: str
    title: str

    def as_dict(self) -> dict[str, str]:
        """The link as the JSON front door shows it."""
        return {"rel": self.rel, "href": self.href, "type": self.type, "title": self.title}


def _quality(accept: str, media_type: str) -> float:
    """The quality ``accept`` gives ``media_type``: its most specific match, 0 for none."""
    kind = media_type.split("/")[0]
    best, specificity = 0.0, -1
    for item in accept.split(","):
        name, *params = (part.strip() for part in item.split(";"))
        rank = {media_type: 2, f"{kind}/*": 1, "*/*": 0}.get(name.lower(), -1)
        if rank <= specificity:
            continue
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        best, specificity = q, rank
    return best


class FrontQuery(Query):
    """The form of the front door's answer."""

    f: Literal["json", "html"] | None = Field(
        None,
        description="The answer's form; unset: by `Accept` (a browser, naming HTML, gets HTML)",
    )


class ViewerQuery(Query):
    """What the viewer opens (read by its script, in the page)."""

    pmtiles: str | None = Field(
        None,
        max_length=2000,
        description="A PMTiles export to draw: its download URL (`…/gis-layer-export/<layer>"
        "/files/<file>`)",
    )


class AssetQuery(Query):
    """A file of the build, by its path in it (checked by :func:`_built`)."""

    path: str
    v: str | None = Field(
        None,
        max_length=40,
        description="A version a script adds to bust caches (MapLibre's worker's); ignored",
    )


def wants_json(request: Request, chosen: str | None) -> bool:
    """Whether the client prefers JSON to HTML: ``chosen`` (``json`` or ``html``, its ``?f=``),
    else its ``Accept``.

    A browser names ``text/html``; a client that names neither (``*/*``, no header) gets JSON.
    """
    if chosen is not None:
        return chosen == "json"
    accept = request.headers.get("accept", "") or "*/*"
    as_json, as_html = _quality(accept, "application/json"), _quality(accept, "text/html")
    if as_json != as_html:
        return as_json > as_html
    return "text/html" not in accept.lower()


def _flower_url(request: Request) -> str:
    """Flower, on its own port of the host the client reached (or of the public URL)."""
    settings = request.app.state.settings
    public = urlsplit(settings.public_url).hostname if settings.public_url else None
    host = public or request.url.hostname or "127.0.0.1"
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"http://{host}:{settings.flower_port}/"


def _links(request: Request) -> list[_Link]:
    root = request.app.state.settings.public_url.rstrip("/")
    prefix = f"{root}{api_prefix(request)}"
    return [
        _Link("viewer", f"{root}/viewer", "text/html", "The map viewer: layers, jobs, live"),
        _Link("service-doc", f"{root}/docs", "text/html", "The API documentation"),
        _Link(
            "service-desc",
            f"{prefix}/openapi.json",
            "application/vnd.oai.openapi+json;version=3.1",
            "The OpenAPI document",
        ),
        _Link("ready", f"{prefix}/ready", "application/json", "Readiness of every dependency"),
        _Link("health", f"{prefix}/health", "application/json", "Liveness and version"),
        _Link("flower", _flower_url(request), "text/html", "Flower, the Celery monitor"),
    ]


#: the favicon of the pages (api/web/src/favicon.svg), inline: the front door needs no build
_ICON = quote(
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32"'
    ' rx="6" fill="#0b5cad"/><path d="M6 22l6-8 5 6 4-4 5 6z" fill="#fff"/>'
    '<circle cx="22" cy="10" r="3" fill="#ffd45c"/></svg>'
)
_FRONT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>mapsvc {version}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:image/svg+xml,{icon}">
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem;
color:#1d2733}}h1{{margin-bottom:0}}.version{{color:#5b6b7c;margin-top:0}}
li{{margin:.4rem 0}}a{{color:#0b5cad}}code{{background:#eef2f6;padding:0 .25rem}}</style></head>
<body><h1>mapsvc</h1><p class="version">version {version}</p>
<p>A map-data backend: raster tiles, PostGIS vector data, providers, and long jobs
watched live.</p>
<ul>{items}</ul>
<p>Every API route is under <code>{prefix}</code>; this page is also JSON
(<code>Accept: application/json</code>).</p></body></html>
"""


async def get_front(request: Request, query: FrontQuery) -> Response:
    """The front door: name, version, links to the viewer, the docs, this document.

    HTML for browsers, else JSON.
    """
    links = _links(request)
    headers = {"Vary": "Accept", "Cache-Control": "no-cache"}  # Flower's link names the host
    if wants_json(request, query.f):
        body = {
            "service": "mapsvc",
            "version": VERSION,
            "links": [link.as_dict() for link in links],
        }
        return JSONResponse(body, headers=headers)
    items = "".join(
        f'<li><a rel="{link.rel}" href="{html.escape(link.href)}">{html.escape(link.title)}</a>'
        f" <code>{html.escape(link.href)}</code></li>"
        for link in links
    )
    page = _FRONT.format(
        version=html.escape(VERSION), items=items, prefix=api_prefix(request), icon=_ICON
    )
    return HTMLResponse(page, headers={**headers, "Content-Security-Policy": _CSP})


def _built(name: str) -> Path:
    """The file ``name`` of the build.

    Raises:
        UnavailableError: there is no build (503, saying how to make one).
        NotFoundError: the build has no such file.
    """
    if not (DIST / "viewer.html").is_file():
        raise UnavailableError(
            f"the web pages are not built: run {_BUILD}", build="make web", dist="api/web/dist"
        )
    parts = name.split("/")
    if any(not part or part.startswith(".") for part in parts) or Path(name).suffix not in _TYPES:
        raise NotFoundError(f"no file {name} in the web build")
    file = DIST.joinpath(*parts)
    if not file.resolve().is_relative_to(DIST.resolve()) or not file.is_file():
        raise NotFoundError(f"no file {name} in the web build")
    return file


def _file(request: Request, file: Path, headers: dict[str, str]) -> Response:
    """``file`` with an ``ETag`` (``304`` on ``If-None-Match``), gzipped when a ``.gz`` is there."""
    media_type = _TYPES[file.suffix]
    packed = file.with_name(file.name + ".gz")
    if "gzip" in request.headers.get("accept-encoding", "") and packed.is_file():
        headers = {**headers, "Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
        file = packed
    response = FileResponse(file, media_type=media_type, headers=headers, stat_result=os.stat(file))
    etag = response.headers["etag"]
    if not_modified(request, etag):
        return Response(status_code=304, headers={**headers, "ETag": etag})
    return response


async def get_viewer(request: Request, query: ViewerQuery) -> Response:
    """The map viewer: layers, their panels, jobs with live progress."""
    return _file(request, _built("viewer.html"), _PAGE_HEADERS)


async def get_api_docs(request: Request) -> Response:
    """The API documentation, Swagger UI on our OpenAPI document."""
    return _file(request, _built("docs.html"), _PAGE_HEADERS)


async def get_web_asset(request: Request, query: AssetQuery) -> Response:
    """A file of the build: scripts, styles, MapLibre GL JS, Swagger UI."""
    return _file(request, _built(query.path), {"Cache-Control": "no-cache"})


def _page(path: str, handler: Handler, query: type[Query] | None = None) -> Endpoint:
    """A page or file at the root: open (a page asks for credentials itself), not API."""
    return Endpoint(
        "GET",
        path,
        handler,
        rule=Rule(None),
        budget="documents",
        query=query,
        place="root",
        documented=False,
    )


#: the front door, under each mount (``/api-user/``) and at the root; then the pages and their
#: files, at the root only
ENDPOINTS = [
    Endpoint(
        "GET",
        "/",
        get_front,
        rule=Rule(None),
        budget="documents",
        query=FrontQuery,
        answer={
            "200": {
                "description": "HTML for a browser, JSON for a client that asks for it",
                "content": {
                    "application/json": {"schema": ref(FrontDoor)},
                    "text/html": {"schema": {"type": "string"}},
                },
            }
        },
        tag="system",
        place="mounts+root",
    ),
    _page("/viewer", get_viewer, ViewerQuery),
    _page("/docs", get_api_docs),
    _page("/web/{path:path}", get_web_asset, AssetQuery),
]
