"""The nginx front of ``make run``: cached tiles straight from the tile cache, the rest to the API.

mod_tile's shape: a cached tile is a file, and a web server sends a file far faster than any
Python stack (docs/benchmarks.md). The front serves a raster tile from ``map/rtile`` only when
the API would answer it the same way:

- anonymous (no credentials, no query) on a public layer (``MAPSVC_PUBLIC_LAYERS``); or with
  credentials (the ``Authorization`` header, or ``api_key`` as the only query) once the API has
  said yes to them for the style (``GET rtile/<style>/access`` through ``auth_request``, the yes
  kept ``MAPSVC_FRONT_ACCESS_TTL_S``); a refusal, a query or a missing file send the request to
  the API, which checks, renders and caches;
- the answer has the API's headers: ``X-Cache: HIT``, ``Cache-Control`` (``private`` for a
  layer that is not public), CORS, and the strong ``ETag`` nginx gives the file (the API gives
  the same) with ``304`` on ``If-None-Match``;
- the tiles budget holds per client address and per credential (``limit_req``); the front's
  own refusals and an API that does not answer are the API's JSON error shape.

Vector tiles of public layers asked anonymously are kept ``MAPSVC_FRONT_VTILE_TTL_S``.
Everything else is passed to the API unbuffered (SSE, streamed GeoJSON, uploads), with the
client's address in ``X-Forwarded-For`` (uvicorn trusts it from loopback only).
"""

from __future__ import annotations

import json
import math
import os
import pwd
import shutil
from pathlib import Path

from shared.settings import LANG_PATTERN, Settings

__all__ = [
    "front_argv",
    "front_enabled",
    "http_basics",
    "nginx_config",
    "nginx_main",
    "write_front_config",
]

_STYLE = "[A-Za-z0-9_-]{1,240}"
_LANG = LANG_PATTERN.strip("^$").replace("(", "(?:")
_TILE = (
    rf"^/(?:api-user|api/v1)/rtile/(?<style>{_STYLE})/(?:(?<lang>{_LANG})/)?"
    r"(?<z>[0-9]{1,2})/(?<x>[0-9]{1,8})/(?<y>[0-9]{1,8}(?:@2x)?)\.(?<ext>png|webp|jpe?g)$"
)
_VTILE = (
    r"^/(?:api-user|api/v1)/vtile/(?<vlayer>[A-Za-z0-9_.-]{1,240})/"
    r"[0-9]{1,2}/[0-9]{1,8}/[0-9]{1,8}\.pbf$"
)


def _error(code: str, message: str, **detail: str) -> str:
    """An answer of the front itself, in the API's error shape (nginx ``return`` text)."""
    body = {"error": {"code": code, "message": message, "detail": detail}}
    return json.dumps(body, separators=(",", ":")).replace("'", "\\'")


#: the front's own refusal (the tiles budget of a client or key), and the API not answering
_RATE_LIMITED = _error(
    "rate-limited", "too many tile requests: slow down (see Retry-After)", budget="tiles"
)
_UNAVAILABLE = _error("unavailable", "the API is not answering: try again shortly")
_EXPOSED = "ETag, X-Cache, X-Request-ID, Retry-After"


def front_enabled(settings: Settings) -> bool:
    """Whether ``make run`` puts nginx before the API (``MAPSVC_FRONT``; ``auto``: if found)."""
    if settings.front == "auto":
        return shutil.which("nginx") is not None
    return settings.front == "nginx"


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


def _worker_user() -> str:
    """nginx's ``user`` line: started as root, its workers would run as nobody, who may not read
    the tile cache (tiles are written 0600), so they run as the user that runs mapsvc."""
    return f"user {pwd.getpwuid(os.geteuid()).pw_name};\n" if os.geteuid() == 0 else ""


def _access(settings: Settings) -> str:
    """The subrequest that asks the API whether a credential may read a style's tiles."""
    ttl = settings.front_access_ttl_s
    cache = (
        f"""
            proxy_buffering on;  # nginx keeps only what it buffers
            proxy_cache access;
            proxy_cache_key "$front_style|$http_authorization|$access_query";
            proxy_cache_valid 204 {ttl}s;
            proxy_cache_lock on;
            proxy_ignore_headers Cache-Control Expires Set-Cookie Vary X-Accel-Expires;"""
        if ttl
        else ""
    )
    return f"""
        location = /_front/access {{
            internal;
            if ($access_anonymous) {{
                return 204;  # a public layer: nothing to ask
            }}
            proxy_pass http://api/api-user/rtile/$front_style/access$access_query;
            proxy_pass_request_body off;
            # a directive here replaces the server's list: all of it again
            proxy_set_header Content-Length "";
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_set_header X-Forwarded-Proto $scheme;{cache}
        }}
"""


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
    return f"""
        location ~ "{_VTILE}" {{
            limit_req zone=tiles burst={settings.auth.rate_tiles_per_min} nodelay;
            limit_req_status 429;
            error_page 429 = @rate_limited;
            error_page 502 504 = @unavailable;  # a list here replaces the server's
            proxy_pass http://api;
            proxy_buffering on;  # nginx keeps only what it buffers
            proxy_cache vtiles;
            proxy_cache_key "$uri|$gzip_ok{origin}";
            proxy_cache_valid 200 204 {ttl}s;
            proxy_cache_bypass $vskip;
            proxy_no_cache $vskip;
            proxy_cache_lock on;
            proxy_cache_use_stale updating;
            proxy_ignore_headers Cache-Control Expires Set-Cookie Vary X-Accel-Expires;
            proxy_hide_header X-Cache;
            proxy_hide_header X-Request-ID;
            add_header X-Cache $vx_cache always;
            add_header X-Request-ID $vrequest_id always;
{hide}{_cors(settings)}        }}
"""


def nginx_main(run_dir: Path, name: str) -> str:
    """The lines of an nginx configuration before ``http``: workers, and ``<name>.pid`` and
    ``<name>-error.log`` in ``run_dir`` (the front's; also the benchmark's plain nginx)."""
    return f"""{_worker_user()}worker_processes auto;
pid {run_dir}/{name}.pid;
error_log {run_dir}/{name}-error.log warn;
events {{ worker_connections 4096; }}
"""


def http_basics(run_dir: Path) -> str:
    """The first lines of ``http``: files sent as fast as nginx can, the tile formats' types,
    temporary files in ``run_dir``."""
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


def nginx_config(settings: Settings, backend: str, run_dir: Path) -> str:
    """The nginx configuration of the front.

    Args:
        settings: listen address and port, tile cache, public layers, limits.
        backend: ``host:port`` of the API.
        run_dir: where nginx keeps its pid, log and temporary files.
    """
    tiles, max_age = settings.dirs.rtile.resolve(), settings.tiles.tile_max_age_s
    per_min = settings.auth.rate_tiles_per_min
    stream_s = int(settings.jobs.sse_max_duration_s) + 60
    retry_s = max(1, math.ceil(60 / per_min))
    return f"""# made by mapsvc (api/front.py); changes are lost on the next start
{nginx_main(run_dir, "nginx")}
http {{
{http_basics(run_dir)}
    # the API's yes per credential and style; vector tiles of public layers (both 0700)
    proxy_cache_path {run_dir}/access levels=1:2 keys_zone=access:4m max_size=64m
                     inactive=10m use_temp_path=off;
    proxy_cache_path {run_dir}/vtiles levels=1:2 keys_zone=vtiles:16m max_size=1g
                     inactive=10m use_temp_path=off;

    # who asks: anonymous (no credentials, no query), keyed (the Authorization header or
    # api_key as the only query), or anything else (the API answers it)
    map $args $args_kind {{
        "" none;
        "~^api_key=[A-Za-z0-9._~-]{{1,512}}$" key;
        default other;
    }}
    map "$args_kind|$http_authorization" $caller {{
        "none|" anonymous;
        "~^none[|]." keyed;
        "key|" keyed;
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
        "~^keyed:" disk;
        default api;
    }}
    map $caller $anonymous_addr {{
        anonymous $binary_remote_addr;
        default "";
    }}
    map $caller $credential {{
        keyed "$http_authorization$arg_api_key";
        default "";
    }}
    # the subrequest asking the API: the key in the tile's query, if any
    map $request_uri $access_query {{
        "~[?](?<aquery>api_key=[A-Za-z0-9._~-]{{1,512}})$" "?$aquery";
        default "";
    }}
    map "$access_query$http_authorization" $access_anonymous {{
        "" 1;
        default "";
    }}
    map $ext $tile_ext {{
        jpeg jpg;
        default $ext;
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
    limit_req_zone $anonymous_addr zone=tiles:10m rate={per_min}r/m;
    limit_req_zone $credential zone=keys:10m rate={per_min}r/m;

    upstream api {{
        server {backend};
        keepalive 64;
    }}

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
        proxy_read_timeout {stream_s}s;
        # the API not answering: its JSON error shape, never nginx's page
        recursive_error_pages on;
        error_page 502 504 = @unavailable;

        location ~ "{_TILE}" {{
            if ($tile_route = api) {{
                return 418;
            }}
            error_page 418 401 403 500 502 503 504 = @api;
            error_page 429 = @rate_limited;
            set $front_style $style;  # the subrequest sees the main request's variables
            limit_req zone=tiles burst={per_min} nodelay;
            limit_req zone=keys burst={per_min} nodelay;
            limit_req_status 429;
            auth_request /_front/access;
            root {tiles};
            try_files /$style/$tile_lang/$z/$x/$y.$tile_ext @api;
            add_header X-Cache HIT always;
            add_header Cache-Control "$tile_visibility, max-age={max_age}" always;
{_cors(settings)}        }}
{_access(settings)}{_vector(settings)}
        location @rate_limited {{
            types {{ }}  # the tile's extension must not name the type of this answer
            default_type application/json;
            add_header Retry-After {retry_s} always;
{_cors(settings)}            return 429 '{_RATE_LIMITED}';
        }}

        location @unavailable {{
            types {{ }}  # the tile's extension must not name the type of this answer
            default_type application/json;
            add_header Retry-After 5 always;
{_cors(settings)}            return 503 '{_UNAVAILABLE}';
        }}

        location @api {{
            proxy_pass http://api;
        }}

        location / {{
            proxy_pass http://api;
        }}
    }}
}}
"""


def write_front_config(settings: Settings, backend: str) -> Path:
    """Write the front's configuration into ``<work_dir>/run/``; its path."""
    run_dir = (settings.work_dir / "run").resolve()
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    path = run_dir / "nginx.conf"
    path.write_text(nginx_config(settings, backend, run_dir))
    os.chmod(path, 0o600)
    return path


def front_argv(config: Path) -> list[str]:
    """The command of the front, in the foreground (its errors go to the run folder's log)."""
    nginx = shutil.which("nginx") or "nginx"
    log = str(config.parent / "nginx-error.log")
    return [nginx, "-e", log, "-c", str(config), "-g", "daemon off;"]
