"""``gis-url-proxy`` relays no header nginx acts on, nor a hop-by-hop one (issue 33, 3).

An allowlisted upstream answers with ``X-Accel-Redirect`` (nginx before the API would serve its
target, with the caller's credentials), ``X-Accel-Buffering``, and a header its ``Connection``
names: none reaches the caller, through the API (both mounts) and through the nginx front, and
the body is the upstream's. The front ignores ``X-Accel-*`` from the API on its own too: before
a stand-in API that sends them, it answers the stand-in's body and never asks for the target.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import httpx2
import pytest

from shared.settings import Settings
from tests.api.test_front import front
from tests.checks import AUTH
from tests.conftest import app_client, free_port, served

BODY = b'{"from": "upstream"}'
#: where the upstream's X-Accel-Redirect points, and what the upstream answers there
INTERNAL = "/some/internal/path"
SECRET = b'{"internal": "secret"}'
#: what the upstream sends besides its body; none of these may reach the caller
UPSTREAM_HEADERS = {
    "X-Accel-Redirect": INTERNAL,
    "X-Accel-Buffering": "yes",
    "X-Accel-Limit-Rate": "1",
    "Connection": "close, X-Secret",
    "X-Secret": "1",
}
NOT_RELAYED = ("x-accel-redirect", "x-accel-buffering", "x-accel-limit-rate", "x-secret")
#: the paths the upstream was asked for
ASKED: list[str] = []


class _Upstream(BaseHTTPRequestHandler):
    """An upstream that answers ``GET`` with :data:`BODY` and :data:`UPSTREAM_HEADERS`, and
    :data:`SECRET` (no such headers) at :data:`INTERNAL`."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        ASKED.append(self.path)
        internal = self.path.startswith(INTERNAL)
        body = SECRET if internal else BODY
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in {} if internal else UPSTREAM_HEADERS.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


needs_nginx = pytest.mark.skipif(shutil.which("nginx") is None, reason="needs nginx")


@pytest.fixture(scope="module")
def upstream() -> Iterator[int]:
    """The upstream on loopback; its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _allowing(settings: Settings, upstream: int, **update: object) -> Settings:
    """``settings`` whose proxy fetches from the upstream (its host allowed, its ``ip:port``
    exempt from the loopback ban), as the other proxy tests allow theirs."""
    allowed = {"proxy_allow_hosts": "127.0.0.1", "proxy_trusted_addresses": f"127.0.0.1:{upstream}"}
    return settings.model_copy(update={**allowed, **update})


@contextmanager
def _work_dir() -> Iterator[Path]:
    """A work dir of its own that nginx's workers pass (``www-data`` when started as root)."""
    work = Path(tempfile.mkdtemp(prefix="mapsvc-front-"))
    work.chmod(0o755)
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _assert_only_the_body(r: httpx.Response | httpx2.Response) -> None:
    assert r.status_code == 200, r.text
    assert r.content == BODY  # not what the X-Accel-Redirect names
    assert r.headers["content-type"] == "application/json"
    for name in NOT_RELAYED:
        assert name not in r.headers, name
    assert "x-secret" not in r.headers.get("connection", "").lower()


@pytest.mark.parametrize("mount", ["/api-user", "/api/v1"])
def test_the_api_drops_accel_and_hop_by_hop_headers(
    settings: Settings, upstream: int, mount: str
) -> None:
    url = f"http://127.0.0.1:{upstream}/tile.json"
    with app_client(_allowing(settings, upstream)) as tc:
        r = tc.get(f"{mount}/gis-url-proxy", params={"url": url})
    _assert_only_the_body(r)


@needs_nginx
def test_the_front_serves_the_upstreams_body_not_its_redirect(
    settings: Settings, upstream: int
) -> None:
    url = f"http://127.0.0.1:{upstream}/tile.json"
    ASKED.clear()
    with _work_dir() as work:
        mine = _allowing(settings, upstream, work_dir=work, port=free_port())
        with served(mine) as api, front(mine, api.removeprefix("http://")) as base:
            for mount in ("/api-user", "/api/v1"):
                r = httpx.get(f"{base}{mount}/gis-url-proxy", params={"url": url}, headers=AUTH)
                _assert_only_the_body(r)
                assert "x-request-id" in r.headers  # the API's answer, passed on
    assert ASKED == ["/tile.json"] * 2


@needs_nginx
@pytest.mark.parametrize(
    "path",
    [
        "/api-user/gis-url-proxy?url=x",  # any route: location /
        "/api-user/vtile/public.points/1/0/0.pbf",  # the vector tiles' locations
        "/api-user/rtile/demo/8/72/110.png?other=1",  # a raster tile for the API: @api
    ],
)
def test_the_front_ignores_accel_headers_of_the_api(
    settings: Settings, upstream: int, path: str
) -> None:
    """The front before a stand-in API (the upstream) that answers with X-Accel-*."""
    with _work_dir() as work:
        mine = settings.model_copy(update={"work_dir": work, "port": free_port()})
        with front(mine, f"127.0.0.1:{upstream}") as base:
            ASKED.clear()
            r = httpx.get(f"{base}{path}", headers=AUTH)
    assert (r.status_code, r.content) == (200, BODY)
    assert not [name for name in r.headers if name.startswith("x-accel-")]
    assert ASKED == [path]  # nginx never asked for the target
