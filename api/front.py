"""The nginx front of ``make run``: cached tiles straight from the tile cache, the rest to the API.

mod_tile's shape: a cached tile is a file, and a web server sends a file far faster than any
Python stack (docs/benchmarks.md). nginx never judges a credential: the API's one parser does
(``api.authn.read_credentials`` and the route's rule). The front sends a raster tile from
``map/rtile`` itself (``rtile``'s URLs, and OGC API – Tiles' of a raster collection,
``…/tiles/WebMercatorQuad/<z>/<y>/<x>.<ext>``: the same file, in the default language) only

- to an anonymous caller (``GET`` or ``HEAD``, no ``Authorization`` header, no ``?`` at all in
  the request line) on a public layer (``MAPSVC_PUBLIC_LAYERS``); or
- to a caller offering one credential (the ``Authorization`` header, or ``api_key`` as the only
  query) once the API has answered ``204`` to ``GET rtile/<style>/access`` carrying exactly what
  the client sent (the same header, the same raw query) for the style nginx read from the
  normalised path (the file it sends). The yes is kept ``MAPSVC_FRONT_ACCESS_TTL_S`` under that
  raw text; it names the caller (``X-Principal``), whose tiles budget the request counts on;
  or
- to a caller asking with rendering parameters (and ``api_key`` among them or not; the header
  or none) once the API has answered the same ``access`` route with the folder their tiles are
  cached in (``X-Tile-Folder``: the digest of the canonical parameters, which only the API
  parses);

anything else (a refusal, another query or method, a missing file) goes to the API, which
checks, renders and caches. A tile from disk has the API's headers: ``X-Cache: HIT``,
``Cache-Control`` (``private`` for a layer that is not public), CORS, and the strong ``ETag``
nginx gives the file (the API gives the same) with ``304`` on ``If-None-Match``.

Every answer of the front itself (a malformed request, a ``#`` in the request line, the tiles
budget, the API not answering) is the API's JSON error shape with ``X-Request-ID``. Vector
tiles (``vtile``'s, OGC API's ``.mvt``) of public layers asked anonymously are kept
``MAPSVC_FRONT_VTILE_TTL_S``. The locations' patterns are the routes' (``api.front_routes``).
Everything else is passed to the API unbuffered (SSE, streamed GeoJSON, uploads), with the
client's address in ``X-Forwarded-For`` (uvicorn trusts it from loopback only). Started as
root, nginx's workers run as ``www-data`` (else ``nobody``), and the tile cache is opened to
their group (docs/front.md).
"""

from __future__ import annotations

import grp
import json
import logging
import math
import os
import pwd
import re
import shutil
import stat
from pathlib import Path
from typing import Any

from api.front_routes import location_pattern, parameter_pattern
from api.mounts import USER_PREFIX
from api.ogc_common import TMS_ID
from api.routes import ogc_tiles, tiles, vector
from api.routes.tiles import ACCESS_QUERY
from shared.settings import Settings

__all__ = [
    "front_argv",
    "front_enabled",
    "front_run_dir",
    "front_vector_cache",
    "http_basics",
    "nginx_config",
    "nginx_main",
    "worker_user",
    "write_front_config",
]

log = logging.getLogger("mapsvc.front")

_ROUTES = {e.name: e for e in (*tiles.ENDPOINTS, *vector.ENDPOINTS, *ogc_tiles.ENDPOINTS)}
_RTILE, _OGC_TILE = _ROUTES["get_tile_format"], _ROUTES["get_ogc_tile_format"]
#: the API's answer to whether a caller may read a layer's tiles
_ACCESS = _ROUTES["get_tile_access"].path.replace("{style}", "$front_style")
#: a vector layer's id as the front reads it (its field says only its length): dots and all
_VECTOR_LAYER = r"[A-Za-z0-9_.-]{1,240}"
#: an OGC API tile's parts by the names of rtile's (z/y/x: OGC's order in the URL), in the one
#: tile matrix set served
_OGC = {"tileMatrix": "z", "tileRow": "y", "tileCol": "x"}
_OGC_TMS = {"tileMatrixSetId": re.escape(TMS_ID)}
#: a query of rendering parameters (the key among them or not), each ``name=value``: the front
#: asks the API whether the caller may read the tiles, and in which folder they are cached
_RENDER_NAMES = "|".join(sorted(ACCESS_QUERY))
_RENDER_QUERY = rf"^[?](?:{_RENDER_NAMES})=[^&]*(?:&(?:{_RENDER_NAMES})=[^&]*)*$"
#: the raster tiles from disk: a tile of a layer in any format, with a language or without
#: (the tile routes' forms); an OGC API tile of a raster collection in an image format, the
#: same file in the default language (it has no language in its path)
_RASTER_TILES = (
    location_pattern(_RTILE, optional=("lang",)),
    location_pattern(
        _OGC_TILE,
        patterns={
            "collectionId": parameter_pattern(_RTILE, "style"),
            "format": parameter_pattern(_RTILE, "format"),
            **_OGC_TMS,
        },
        names={"collectionId": "style", **_OGC},
    ),
)
#: the vector tiles kept: ``vtile``'s, and an OGC API tile of a vector collection
_VECTOR_TILES = (
    location_pattern(
        _ROUTES["get_vtile"], patterns={"layer": _VECTOR_LAYER}, names={"layer": "vlayer"}
    ),
    location_pattern(
        _OGC_TILE,
        patterns={"collectionId": _VECTOR_LAYER, "format": "mvt", **_OGC_TMS},
        names={"collectionId": "vlayer", **_OGC},
    ),
)


def _error(code: str, message: str, **detail: str) -> str:
    """An answer of the front itself, in the API's error shape (nginx ``return`` text)."""
    body = {"error": {"code": code, "message": message, "detail": detail}}
    return json.dumps(body, separators=(",", ":")).replace("'", "\\'")


#: the front's own refusal (the tiles budget of a client or key), and the API not answering
_RATE_LIMITED = _error(
    "rate-limited", "too many tile requests: slow down (see Retry-After)", budget="tiles"
)
_ADDRESS_LIMITED = _error(
    "rate-limited",
    "too many requests from this address: slow down (see Retry-After)",
    budget="address",
)
_UNAVAILABLE = _error("unavailable", "the API is not answering: try again shortly")
#: what nginx refuses before the API sees it: (status nginx gives it, status sent, code, message);
#: 494 (a header too large) goes out as 400
_REFUSALS = (
    (
        400,
        400,
        "invalid-input",
        "malformed request: a bad request line, %-escape or header, or a header sent twice",
    ),
    (404, 404, "not-found", "no such route"),
    (414, 414, "invalid-input", "the URL is too long"),
    (494, 400, "invalid-input", "a request header is too large"),
    (500, 500, "internal", "internal error of the front"),
    (501, 501, "invalid-input", "this Transfer-Encoding is not supported"),
    (505, 505, "invalid-input", "this HTTP version is not supported"),
)
_FRAGMENT = _error(
    "invalid-input",
    "a '#' in the request line: a fragment is not sent to a server (as data: %23)",
)
_EXPOSED = "ETag, X-Cache, X-Request-ID, Retry-After"
#: the API's answer headers nginx would act on, ignored in every location that passes to the
#: API (a directive there replaces the server's list: those that set one name these too). The
#: API sends none but ``X-Accel-Buffering: no`` on its event streams, for proxies other than
#: this front, which passes them unbuffered anyway; an ``X-Accel-Redirect`` that reached an
#: answer (a relayed upstream's) would make nginx serve its target with the caller's credentials
_ACCEL = "X-Accel-Redirect X-Accel-Expires X-Accel-Limit-Rate X-Accel-Buffering X-Accel-Charset"
#: the folder of the run folder where the front keeps vector tiles
_VTILES = "vtiles"
#: the room for a socket's path in ``sockaddr_un`` (Linux), its closing zero included
_SOCKET_PATH_MAX = 108


def front_enabled(settings: Settings) -> bool:
    """Whether ``make run`` puts nginx before the API (``MAPSVC_FRONT``; ``auto``: if found)."""
    if settings.front == "auto":
        return shutil.which("nginx") is not None
    return settings.front == "nginx"


def worker_user() -> pwd.struct_passwd | None:
    """The unprivileged user nginx's workers run as when it starts as root (``www-data``, else
    ``nobody``); None when it does not start as root (its workers are its own user then)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("www-data")
    except KeyError:
        return pwd.getpwnam("nobody")


def _public_map(settings: Settings) -> str:
    public = settings.auth.public_layers
    if "*" in public:
        return "    default 1;"
    return "\n".join(["    default 0;", *(f'    "{layer}" 1;' for layer in sorted(public))])


def _cors(settings: Settings) -> str:
    if "*" not in settings.auth.cors_origins:
        return ""  # explicit origins are echoed by the API: the front leaves those to it
    return (
        '            add_header Access-Control-Allow-Origin "*" always;\n'
        f'            add_header Access-Control-Expose-Headers "{_EXPOSED}" always;\n'
    )


def _json_answer(settings: Settings) -> str:
    """The lines of a location whose answer is the front's own JSON error."""
    return (
        "            types { }  # the tile's extension must not name the type of this answer\n"
        "            default_type application/json;\n"
        "            add_header X-Request-ID $request_id always;\n"
        f"{_cors(settings)}"
    )


def _refusals(settings: Settings) -> str:
    """The front's own refusals: the pages of what nginx refuses itself, and a ``#``."""
    pages = "".join(
        f"""
        location = /_front/refused/{caught} {{
            internal;
{_json_answer(settings)}            return {sent} '{_error(code, message)}';
        }}
"""
        for caught, sent, code, message in _REFUSALS
    )
    return f"""{pages}
        location = /_front/refused/fragment {{
            internal;
{_json_answer(settings)}            return 400 '{_FRAGMENT}';
        }}
"""


def _per_address(settings: Settings, zone: str = "addr") -> str:
    """The line of a location passing to the API that counts the client's address
    (``MAPSVC_FRONT_RATE_PER_S``); none when that limit is off.

    Not in the raster tiles' own locations: nginx counts a request once, in the first
    location of it, or of a subrequest of it, that has a ``limit_req`` (the next locations'
    are skipped), and ``@tile`` must count the tiles budget. The access check they ask counts
    the address in a server of its own (:func:`_access_checker`), a request of its own."""
    if not settings.front_rate_per_s:
        return ""
    # the burst at once, the queue kept waiting their turn (a client asking on that many
    # connections, however hard, is slowed to the pace: a refusal at once it would follow with
    # the next request, thousands a second, each costing nginx's CPU), and the rest refused
    burst, queue = settings.front_burst, settings.front_queue
    return f"            limit_req zone={zone} burst={burst + queue} delay={burst};\n"


def _per_address_zones(settings: Settings) -> str:
    """The ``http`` lines of the per-address zones; none when that limit is off."""
    if not settings.front_rate_per_s:
        return ""
    rate = settings.front_rate_per_s
    return f"""    # every request passed to the API, per client address: a flood is refused here,
    # in microseconds, before it takes the API's event loop from everyone else; the
    # access checks of tiles by the address the front put in X-Forwarded-For (only the
    # front reaches the checker's socket)
    limit_req_zone $binary_remote_addr zone=addr:10m rate={rate}r/s;
    limit_req_zone $http_x_forwarded_for zone=checks:10m rate={rate}r/s;
    limit_req_status 429;
"""


def _checked(settings: Settings) -> str:
    """The lines of ``@api`` that refuse a tile whose access check the checker refused (the
    address past its pace: counted there, not counted again; ``X-Front-Refused``, not the
    API's own ``429``); none when that limit is off."""
    if not settings.front_rate_per_s:
        return ""
    return """            if ($access_refused) {
                return 429;
            }
"""


def _access_socket(settings: Settings, run_dir: Path) -> Path:
    """The socket of the access checker of the front on ``MAPSVC_PORT`` (one per port: two
    fronts on one work dir each have their own)."""
    return run_dir / f"access-{settings.port}.sock"


def _access_checker(settings: Settings, run_dir: Path) -> str:
    """The server the front's access checks pass through to the API, on a socket in
    ``run_dir``: it counts the checks per client address (``MAPSVC_FRONT_RATE_PER_S``)."""
    return f"""
    upstream access_check {{
        server unix:{_access_socket(settings, run_dir)};
        keepalive 16;
    }}

    server {{
        listen unix:{_access_socket(settings, run_dir)};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $http_host;
        proxy_ignore_headers {_ACCEL};
        # its own refusal says so (the API's 429, the caller's tiles budget, goes on to the
        # API's answer)
        error_page 429 = @refused;
        location / {{
{_per_address(settings, "checks")}            proxy_pass http://{_api(settings)};
        }}
        location @refused {{
            add_header X-Front-Refused 1 always;
            return 429;
        }}
    }}
"""


def _api(settings: Settings) -> str:
    """What ``proxy_pass`` names the API by: the upstream ``api``, looked up once at start, or,
    with ``MAPSVC_FRONT_RESOLVER``, a variable, whose name nginx looks up at request time."""
    return "$api_backend" if settings.front_resolver else "api"


def _upstream(settings: Settings, backend: str) -> str:
    """The API's address: an upstream of kept connections, or the name and the resolver."""
    if settings.front_resolver:
        # no upstream block: nginx would look the name up once; a variable is looked up
        # when a request needs it (the answer kept 10 s), so a re-created API is found
        return f"""    resolver {settings.front_resolver} valid=10s;
    map $host $api_backend {{
        default {backend};
    }}"""
    return f"""    upstream api {{
        server {backend};
        keepalive 64;
    }}"""


def _access(settings: Settings) -> str:
    """The subrequest that asks the API whether what the client sent may read a style's tiles:
    the same ``Authorization`` header (all the client's headers pass), the same raw query."""
    ttl = settings.front_access_ttl_s
    cache = (
        f"""
            proxy_buffering on;  # nginx keeps only what it buffers
            proxy_cache access;
            proxy_cache_key "$front_style|$http_authorization|$raw_query";
            proxy_cache_valid 204 {ttl}s;
            proxy_cache_lock on;
            proxy_ignore_headers Cache-Control Expires Set-Cookie Vary {_ACCEL};
            # the kept yes stays open between requests: no open and close of its file on every
            # tile (a tenth of a keyed tile's cost, docs/benchmarks.md). nginx still reads its
            # expiry from the file each time, and reopens it once replaced (its inode changed)
            open_file_cache max=1000 inactive=20s;"""
        if ttl
        else ""
    )
    return f"""
        location = /_front/access {{
            internal;
            if ($tile_route = disk) {{
                return 204;  # anonymous on a public layer: nothing to ask
            }}
            # through the checker (its own server, so its count of the address leaves the
            # tiles budget to @tile); its 429 is an error to auth_request: on to @api, which
            # refuses the request without asking the API. One credential is asked about once
            # at a time (proxy_cache_lock): the same wrong key, sent at once, waits its turn
            proxy_pass http://access_check{USER_PREFIX}{_ACCESS}$raw_query;
            proxy_pass_request_body off;
            # a directive here replaces the server's list: all of it again
            proxy_set_header Content-Length "";
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_set_header X-Forwarded-Proto $scheme;{cache}
        }}
"""


def _raster(settings: Settings) -> str:
    """Raster tiles: from disk once the caller may read them, after the tiles budget."""
    tiles, max_age = settings.dirs.rtile.resolve(), settings.tiles.max_age_s
    per_min = settings.auth.rate_tiles_per_min
    locations = "".join(
        f"""
        location ~ "{pattern}" {{
            if ($tile_route = api) {{
                return 418;
            }}
            error_page 418 401 403 500 502 503 504 = @api;
            set $front_style $style;  # the subrequest sees the main request's variables
            auth_request /_front/access;
            auth_request_set $principal $upstream_http_x_principal;
            auth_request_set $access_refused $upstream_http_x_front_refused;  # for @api
            auth_request_set $tile_folder $upstream_http_x_tile_folder;
            # on to @tile after the access phase: limit_req runs before it, and the budget of
            # a caller with credentials is the principal the API named
            root {tiles};
            try_files "" @tile;
        }}
"""
        for pattern in _RASTER_TILES
    )
    return f"""{locations}
        location @tile {{
            error_page 429 = @rate_limited;
            error_page 502 504 = @unavailable;  # a list here replaces the server's
            limit_req zone=tiles burst={per_min} nodelay;
            limit_req zone=keys burst={per_min} nodelay;
            limit_req_status 429;
            max_ranges 0;  # the whole tile, as the API sends it
            root {tiles};
            try_files /$style/$tile_lang$tile_folder/$z/$x/$y.$tile_ext @api;
            add_header X-Cache HIT always;
            add_header Cache-Control "$tile_visibility, max-age={max_age}" always;
{_cors(settings)}        }}
{_access(settings)}"""


def _vector(settings: Settings) -> str:
    """Vector tiles: a public layer's answers kept a moment (``MAPSVC_FRONT_VTILE_TTL_S``)."""
    ttl = settings.front_vtile_ttl_s
    if not ttl:
        return ""
    # CORS: with every origin allowed the front says so itself; else the API's answer to one
    # origin is kept for that origin only
    any_origin = "*" in settings.auth.cors_origins
    origin = "" if any_origin else "|$http_origin"
    hide = (
        "            proxy_hide_header Access-Control-Allow-Origin;\n"
        "            proxy_hide_header Access-Control-Expose-Headers;\n"
        if any_origin
        else ""
    )
    return "".join(
        f"""
        location ~ "{pattern}" {{
            limit_req zone=tiles burst={settings.auth.rate_tiles_per_min} nodelay;
{_per_address(settings)}            limit_req_status 429;
            error_page 429 = @rate_limited;
            error_page 502 504 = @unavailable;  # a list here replaces the server's
            proxy_pass http://{_api(settings)};
            proxy_buffering on;  # nginx keeps only what it buffers
            proxy_cache vtiles;
            proxy_cache_key "$uri|$gzip_ok{origin}";
            proxy_cache_valid 200 204 {ttl}s;
            proxy_cache_bypass $vskip;
            proxy_no_cache $vskip;
            proxy_cache_lock on;
            proxy_cache_use_stale updating;
            proxy_ignore_headers Cache-Control Expires Set-Cookie Vary {_ACCEL};
            proxy_hide_header X-Cache;
            proxy_hide_header X-Request-ID;
            add_header X-Cache $vx_cache always;
            add_header X-Request-ID $vrequest_id always;
{hide}{_cors(settings)}        }}
"""
        for pattern in _VECTOR_TILES
    )


def _disk_http(settings: Settings, run_dir: Path) -> str:
    """The ``http`` lines of the tiles sent from disk: kept answers, who asks, the budgets."""
    per_min = settings.auth.rate_tiles_per_min
    return f"""
    # the API's yes per style and what the client sent; vector tiles of public layers (both 0700)
    proxy_cache_path {run_dir}/access levels=1:2 keys_zone=access:4m max_size=64m
                     inactive=10m use_temp_path=off;
    proxy_cache_path {run_dir}/{_VTILES} levels=1:2 keys_zone=vtiles:16m max_size=1g
                     inactive=10m use_temp_path=off;

    # who asks, read from what the client sent and nothing else: anonymous (GET or HEAD, no
    # Authorization header, no '?' in the request line), keyed (the Authorization header, or
    # api_key as the only query: the API judges it), or anything else (the API answers it)
    map $request_uri $raw_query {{
        "~^[^?]*(?<rq>[?].*)$" $rq;
        default "";
    }}
    map $raw_query $query_kind {{
        "" none;
        "~^[?]api_key=[A-Za-z0-9._~-]{{1,512}}$" key;
        "~{_RENDER_QUERY}" rendering;
        default other;
    }}
    map "$request_method:$query_kind:$http_authorization" $caller {{
        "GET:none:" anonymous;
        "HEAD:none:" anonymous;
        "~^(?:GET|HEAD):none:." keyed;
        "GET:key:" keyed;
        "HEAD:key:" keyed;
        "~^(?:GET|HEAD):rendering:" keyed;
        default other;
    }}
    map $style $public {{
{_public_map(settings)}
    }}
    map $vlayer $vpublic {{
{_public_map(settings)}
    }}
    map $public $tile_visibility {{
        1 public;
        default private;
    }}
    map "$caller:$public" $tile_route {{
        "anonymous:1" disk;
        "~^keyed:" keyed;
        default api;
    }}
    # the API names an anonymous caller with rendering parameters "anonymous": per address too
    map "$caller|$principal" $anonymous_addr {{
        "~^anonymous[|]" $binary_remote_addr;
        "~[|]anonymous$" $binary_remote_addr;
        default "";
    }}
    map $principal $principal_budget {{
        anonymous "";
        default $principal;
    }}
    map $format $tile_ext {{
        jpeg jpg;
        default $format;
    }}
    map $lang $tile_lang {{
        "" {settings.default_lang};
        default $lang;
    }}
    map "$caller:$vpublic" $vskip {{
        "anonymous:1" "";
        default 1;
    }}
    map $http_accept_encoding $gzip_ok {{
        "~gzip" 1;
        default 0;
    }}
    map $upstream_cache_status $vx_cache {{
        HIT HIT;
        UPDATING HIT;
        default $upstream_http_x_cache;
    }}
    map $upstream_cache_status $vrequest_id {{
        HIT "";
        UPDATING "";
        default $upstream_http_x_request_id;
    }}
    # the tiles budget: per client address for anonymous callers, else per principal
    limit_req_zone $anonymous_addr zone=tiles:10m rate={per_min}r/m;
    limit_req_zone $principal_budget zone=keys:10m rate={per_min}r/m;
"""


def nginx_main(run_dir: Path, name: str) -> str:
    """The lines of an nginx configuration before ``http``: workers (not root, see
    :func:`worker_user`), ``<name>.pid`` and ``<name>-error.log`` in ``run_dir`` (the front's;
    also the benchmark's plain nginx). The error log keeps only critical messages: nginx quotes
    the request line, query and credentials included, in the others."""
    worker = worker_user()
    user = (
        f"user {worker.pw_name} {grp.getgrgid(worker.pw_gid).gr_name};\n"
        if worker is not None
        else ""
    )
    return f"""{user}worker_processes auto;
pid {run_dir}/{name}.pid;
error_log {run_dir}/{name}-error.log crit;
events {{ worker_connections 4096; }}
"""


def http_basics(run_dir: Path) -> str:
    """The first lines of ``http``: no access log (queries carry keys), files sent as fast as
    nginx can, the tile formats' types, temporary files in ``run_dir``."""
    return f"""    access_log off;
    server_tokens off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    types {{
        image/png png;
        image/webp webp;
        image/jpeg jpg;
    }}
    default_type application/octet-stream;
    client_body_temp_path {run_dir}/body;
    proxy_temp_path {run_dir}/proxy;
    fastcgi_temp_path {run_dir}/fastcgi;
    uwsgi_temp_path {run_dir}/uwsgi;
    scgi_temp_path {run_dir}/scgi;"""


def nginx_config(settings: Settings, backend: str, run_dir: Path, *, disk: bool = True) -> str:
    """The nginx configuration of the front.

    Args:
        settings: listen address and port, tile cache, public layers, limits.
        backend: ``host:port`` of the API.
        run_dir: where nginx keeps its pid, log and temporary files.
        disk: whether nginx's workers may read the tile cache and ``run_dir``; if not, the
            front passes every request to the API.
    """
    stream_s = int(settings.jobs.sse_max_duration_s) + 60
    retry_s = max(1, math.ceil(60 / settings.auth.rate_tiles_per_min))
    refused = "".join(
        f"        error_page {caught} /_front/refused/{caught};\n" for caught, *_ in _REFUSALS
    )
    return f"""# made by mapsvc (api/front.py); changes are lost on the next start
{nginx_main(run_dir, "nginx")}
http {{
{http_basics(run_dir)}
{_disk_http(settings, run_dir) if disk else ""}
{_per_address_zones(settings)}
    # a '#' in the request line: uvicorn would drop it and what follows, unseen
    map $request_uri $fragment {{
        "~#" 1;
        default "";
    }}

{_upstream(settings, backend)}
{_access_checker(settings, run_dir) if disk else ""}

    server {{
        listen {settings.host}:{settings.port};
        client_max_body_size 0;  # the API enforces its own limits
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $http_host;
        proxy_set_header X-Forwarded-For $remote_addr;
        proxy_set_header X-Forwarded-Proto $scheme;
        proxy_buffering off;  # event streams and streamed answers flow as they come
        proxy_request_buffering off;
        proxy_ignore_headers {_ACCEL};
        proxy_read_timeout {stream_s}s;
        # what nginx refuses itself, and the API not answering: the API's JSON error shape;
        # pages by URI: a request line nginx could not read has no URI to go to a named
        # location from
        recursive_error_pages on;
{refused}        error_page 502 504 = @unavailable;
        error_page 429 = @address_limited;  # the front's own: the API's pass unchanged
        if ($fragment) {{
            rewrite ^ /_front/refused/fragment last;
        }}
{(_raster(settings) + _vector(settings)) if disk else ""}{_refusals(settings)}
        location @rate_limited {{
{_json_answer(settings)}            add_header Retry-After {retry_s} always;
            return 429 '{_RATE_LIMITED}';
        }}

        location @address_limited {{
{_json_answer(settings)}            add_header Retry-After 1 always;
            return 429 '{_ADDRESS_LIMITED}';
        }}

        location @unavailable {{
{_json_answer(settings)}            add_header Retry-After 5 always;
            return 503 '{_UNAVAILABLE}';
        }}

        location @api {{
{_checked(settings) if disk else ""}{_per_address(settings)}            proxy_pass http://{_api(settings)};
        }}

        location / {{
{_per_address(settings)}            proxy_pass http://{_api(settings)};
        }}
    }}
}}
"""


def _blocking(folder: Path, user: pwd.struct_passwd) -> Path | None:
    """The first folder from the root down to ``folder`` that ``user`` may not pass, if any."""
    groups = {user.pw_gid} | {g.gr_gid for g in grp.getgrall() if user.pw_name in g.gr_mem}
    for step in (*reversed(folder.parents), folder):
        info = step.stat()
        if info.st_uid == user.pw_uid:
            bit = stat.S_IXUSR
        elif info.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return step
    return None


def _open_to_workers(settings: Settings, run_dir: Path, worker: pwd.struct_passwd) -> bool:
    """Open the tile cache to the group of nginx's workers (``2750``: the folders and tiles made
    in it later are the group's too, other users see none); whether the workers reach it and
    ``run_dir``."""
    rtile = settings.dirs.rtile.resolve()
    os.chown(rtile, -1, worker.pw_gid)
    os.chmod(rtile, 0o2750)
    os.chmod(run_dir, 0o711)  # nginx gives its own folders in it to the workers
    for folder in (rtile.parent, run_dir):
        blocked = _blocking(folder, worker)
        if blocked is not None:
            log.warning(
                "nginx's workers run as %s, who may not pass %s: the front passes every request"
                " to the API (no tiles from disk); chmod o+x %s lets them through",
                worker.pw_name,
                blocked,
                blocked,
            )
            return False
    return True


def write_front_config(settings: Settings, backend: str) -> Path:
    """Write the front's configuration into ``<work_dir>/run/``; its path."""
    run_dir = front_run_dir(settings)
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    settings.dirs.rtile.mkdir(parents=True, exist_ok=True)
    worker = worker_user()
    disk = worker is None or _open_to_workers(settings, run_dir, worker)
    socket = _access_socket(settings, run_dir)
    if len(str(socket).encode()) >= _SOCKET_PATH_MAX:
        raise ValueError(
            f"the front's socket {socket} is a longer path than a socket may have"
            f" ({_SOCKET_PATH_MAX - 1} bytes): choose a shorter MAPSVC_WORK_DIR"
        )
    socket.unlink(missing_ok=True)  # left by an nginx that did not stop cleanly
    path = run_dir / "nginx.conf"
    path.write_text(nginx_config(settings, backend, run_dir, disk=disk))
    os.chmod(path, 0o600)
    return path


def front_run_dir(settings: Settings) -> Path:
    """The front's folder: its configuration, pid, log, kept answers and temporary files."""
    return (settings.work_dir / "run").resolve()


def front_vector_cache(settings: Settings) -> dict[str, Any]:
    """Where the front keeps vector tiles (``folder``), and the patterns of their paths in
    Python's syntax, with the groups ``vlayer``, ``z``, ``x`` and ``y`` (``patterns``): what
    truncation and expiry remove from it (``shared.vector.front_cache``)."""
    return {
        "folder": str(front_run_dir(settings) / _VTILES),
        "patterns": [re.sub(r"\(\?<(?=[A-Za-z])", "(?P<", p) for p in _VECTOR_TILES],
    }


def front_argv(config: Path) -> list[str]:
    """The command of the front, in the foreground (its errors go to the run folder's log)."""
    nginx = shutil.which("nginx") or "nginx"
    log_file = str(config.parent / "nginx-error.log")
    return [nginx, "-e", log_file, "-c", str(config), "-g", "daemon off;"]
