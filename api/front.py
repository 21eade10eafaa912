"""The nginx front of ``make run``: cached tiles straight from the tile cache, the rest to the API.

mod_tile's shape: a cached tile is a file, and a web server sends a file far faster than any
Python stack (``make bench``: nginx serves the tile cache at ~20x the API's rate). The front
serves a tile from ``map/rtile`` only when every rule of the API would answer it the same way:

- the layer is public (``MAPSVC_PUBLIC_LAYERS``) and the request carries no credentials and
  no query (no ``nocache``, ``isS3``, ``debug``, BBOX, ``api_key``): credentials, a query or a
  missing file send the request to the API, which checks, renders and caches;
- the answer has the API's headers: ``X-Cache: HIT``, ``Cache-Control``, CORS, and a strong
  ``ETag`` (nginx's, from the file's time and size) with ``304`` on ``If-None-Match``;
- the tiles budget holds per client address (``limit_req``, ``MAPSVC_RATE_TILES_PER_MIN``).

Everything else is passed to the API unbuffered (SSE, streamed GeoJSON, uploads), with the
client's address in ``X-Forwarded-For`` (uvicorn trusts it from loopback only).
"""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

from shared.settings import LANG_PATTERN, Settings

__all__ = [
    "front_argv",
    "front_enabled",
    "nginx_config",
    "worker_user",
    "write_front_config",
]

_STYLE = "[A-Za-z0-9_-]{1,240}"
_LANG = LANG_PATTERN.strip("^$").replace("(", "(?:")
_TILE = (
    rf"^/(?:api-user|api/v1)/rtile/(?<style>{_STYLE})/(?:(?<lang>{_LANG})/)?"
    r"(?<z>[0-9]{1,2})/(?<x>[0-9]{1,8})/(?<y>[0-9]{1,8}(?:@2x)?)\.(?<ext>png|webp|jpe?g)$"
)
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


def worker_user() -> str:
    """nginx's ``user`` line: started as root, its workers would run as nobody, who may not read
    the tile cache (tiles are written 0600), so they run as the user that runs mapsvc."""
    return f"user {pwd.getpwuid(os.geteuid()).pw_name};\n" if os.geteuid() == 0 else ""


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
    return f"""# made by mapsvc (api/front.py); changes are lost on the next start
{worker_user()}worker_processes auto;
pid {run_dir}/nginx.pid;
error_log {run_dir}/nginx-error.log warn;
events {{ worker_connections 4096; }}

http {{
    access_log off;
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
    scgi_temp_path {run_dir}/scgi;

    # a tile comes from the cache only without credentials and without a query
    map "$args$http_authorization" $plain {{
        "" 1;
        default 0;
    }}
    map $style $public {{
{_public_map(settings)}
    }}
    map $ext $tile_ext {{
        jpeg jpg;
        default $ext;
    }}
    map $lang $tile_lang {{
        "" {settings.default_lang};
        default $lang;
    }}
    limit_req_zone $binary_remote_addr zone=tiles:10m rate={per_min}r/m;

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

        location ~ "{_TILE}" {{
            set $fast "$plain$public";
            if ($fast != "11") {{
                return 418;
            }}
            error_page 418 = @api;
            limit_req zone=tiles burst={per_min} nodelay;
            limit_req_status 429;
            root {tiles};
            try_files /$style/$tile_lang/$z/$x/$y.$tile_ext @api;
            add_header X-Cache HIT always;
            add_header Cache-Control "public, max-age={max_age}" always;
{_cors(settings)}        }}

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
