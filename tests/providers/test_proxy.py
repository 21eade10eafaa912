"""gis-url-proxy: fetches allowed URLs, refuses every SSRF attempt before connecting."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import httpx
import httpx2
import pytest
from starlette.testclient import TestClient

from shared.errors import ForbiddenError
from shared.providers.proxy import GuardedTransport
from shared.settings import Settings
from tests.checks import AUTH, assert_error
from tests.conftest import app_client
from tests.providers import fakes

ALLOWED = "127.0.0.1,localhost,::1,::ffff:127.0.0.1,0.0.0.0,169.254.169.254,10.0.0.1,*.example.org"


@pytest.fixture
def victim() -> Iterator[fakes.ResetServer]:
    """A loopback server the proxy must never reach: it counts the connections it accepts."""
    server = fakes.ResetServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def proxy_client(psettings: Settings, fake_base: str) -> Iterator[TestClient]:
    port = fake_base.rsplit(":", 1)[1]
    update = {
        "proxy_allow_hosts": ALLOWED,
        # the fake provider server alone is exempt from the loopback ban (its ip:port)
        "proxy_trusted_addresses": f"127.0.0.1:{port}",
        "proxy_max_bytes": 2048,
        "proxy_timeout_s": 1.0,
    }
    with app_client(psettings.model_copy(update=update)) as tc:
        yield tc


def proxy(tc: TestClient, url: str, **headers: str) -> httpx2.Response:
    return tc.get("/api-user/gis-url-proxy", params={"url": url}, headers=headers)


def test_proxied_fetch(proxy_client: TestClient, fake_base: str) -> None:
    r = proxy(
        proxy_client,
        f"{fake_base}/proxy/data.geojson",
        Cookie="mine=1",
        Authorization=AUTH["Authorization"],  # the caller's credentials stay here
        Accept="application/geo+json",
    )
    assert r.status_code == 200
    body = r.json()
    assert body["type"] == "FeatureCollection"
    seen = body["seen_headers"]
    assert "cookie" not in seen
    assert "authorization" not in seen
    assert seen["accept"] == "application/geo+json"
    assert r.headers["content-type"] == "application/geo+json"
    assert r.headers["x-layer"] == "demo"
    assert "access-control-allow-origin" not in r.headers  # CORS only when configured
    assert "set-cookie" not in r.headers
    assert "www-authenticate" not in r.headers


def test_upstream_status_is_relayed(proxy_client: TestClient, fake_base: str) -> None:
    r = proxy(proxy_client, f"{fake_base}/proxy/missing")
    assert (r.status_code, r.text) == (404, "no such layer")


def test_redirect_inside_the_rules_is_followed(proxy_client: TestClient, fake_base: str) -> None:
    r = proxy(proxy_client, f"{fake_base}/proxy/redirect?to=/proxy/data.geojson")
    assert r.status_code == 200
    assert r.json()["type"] == "FeatureCollection"


@pytest.mark.parametrize(
    "template",
    [
        "http://127.0.0.1:{port}/",
        "http://[::1]:{port}/",
        "http://localhost:{port}/",  # a name that resolves to loopback
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://[::ffff:127.0.0.1]:{port}/",
        "http://0.0.0.0:{port}/",
        "file:///etc/passwd",
        "gopher://127.0.0.1:{port}/_SET",
        "ftp://127.0.0.1:{port}/",
        "http://user:pw@127.0.0.1:{port}/",
        "http://evil.test/",  # not on the allowlist
        "http://example.org.evil.test/",
    ],
)
def test_ssrf_is_refused(
    proxy_client: TestClient, victim: fakes.ResetServer, template: str
) -> None:
    r = proxy(proxy_client, template.format(port=victim.port))
    assert r.status_code == 403, r.text
    assert_error(r.json(), "forbidden")
    assert victim.accepted == 0


@pytest.mark.parametrize("target", ["http://127.0.0.1:{port}/", "http://10.0.0.1/", "file:///x"])
def test_redirect_to_a_private_address_is_refused(
    proxy_client: TestClient, fake_base: str, victim: fakes.ResetServer, target: str
) -> None:
    to = target.format(port=victim.port)
    r = proxy(proxy_client, f"{fake_base}/proxy/redirect?to={to}")
    assert r.status_code == 403
    assert_error(r.json(), "forbidden")
    assert victim.accepted == 0
    assert len(fakes.CALLS["proxy"]) == 1  # the redirect itself was fetched


def test_a_trusted_address_is_trusted_on_its_port_only(
    psettings: Settings, fake_base: str, victim: fakes.ResetServer
) -> None:
    update = {
        "proxy_allow_hosts": "127.0.0.1",
        "proxy_trusted_addresses": f"127.0.0.1:{victim.port + 1}",
    }
    with app_client(psettings.model_copy(update=update)) as tc:
        r = proxy(tc, f"http://127.0.0.1:{victim.port}/")
    assert r.status_code == 403
    assert victim.accepted == 0


def test_size_and_time_limits(proxy_client: TestClient, fake_base: str) -> None:
    r = proxy(proxy_client, f"{fake_base}/proxy/big")
    assert r.status_code == 502
    assert assert_error(r.json(), "upstream-error")["detail"]["max_bytes"] == 2048
    r = proxy(proxy_client, f"{fake_base}/proxy/slow")
    assert r.status_code == 524
    assert r.elapsed.total_seconds() < 2.9  # the fake answers after 3 s


def test_proxy_bad_input(proxy_client: TestClient) -> None:
    r = proxy_client.get("/api-user/gis-url-proxy")
    assert r.status_code == 400
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == "url"
    r = proxy(proxy_client, "http://")
    assert r.status_code == 400


def test_proxy_refusals_carry_its_headers(proxy_client: TestClient, fake_base: str) -> None:
    """Refused before the fetch (credentials): still no sniffing, the sandbox."""
    r = proxy(proxy_client, f"{fake_base}/proxy/data.geojson", Authorization="Bearer nonsense")
    assert r.status_code == 401
    assert_error(r.json(), "invalid-token")
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in r.headers["content-security-policy"]
    assert not fakes.CALLS["proxy"]


def test_empty_allowlist_refuses_everything(bare_client: TestClient, fake_base: str) -> None:
    r = proxy(bare_client, f"{fake_base}/proxy/data.geojson")
    assert r.status_code == 403
    assert not fakes.CALLS["proxy"]


@pytest.mark.anyio
async def test_every_connection_is_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name that resolved to a public address, then to loopback (DNS rebinding)."""
    answers = [["93.184.215.14"], ["127.0.0.1"], ["93.184.215.14", "10.1.2.3"]]
    connected: list[str] = []

    async def resolve(host: str, port: int, **kwargs: object) -> list[tuple]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in answers.pop(0)]

    def record(request: httpx.Request) -> httpx.Response:
        connected.append(request.url.host)  # never a real connection to a public address
        return httpx.Response(204)

    transport = GuardedTransport(lambda: httpx.MockTransport(record))
    request = httpx.Request("GET", "http://rebind.example.org/")
    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", resolve)
    await transport.handle_async_request(request)
    for _ in range(2):
        with pytest.raises(ForbiddenError):
            await transport.handle_async_request(request)
    assert connected == ["93.184.215.14"]  # the checked address, and only the first time
