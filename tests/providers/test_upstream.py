"""The provider layer: retries, errors as 52x statuses, the shared rate limit, the cache."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import httpx
import pytest
import redis.asyncio as aioredis
from starlette.testclient import TestClient

from shared.errors import UpstreamConnectTimeoutError
from shared.providers.config import Provider
from shared.providers.upstream import Upstream, make_http_client
from shared.settings import Settings
from tests.checks import assert_error
from tests.conftest import app_client, free_port, with_providers
from tests.providers import fakes

GEOCODE = ("/api-user/geocode", {"q": "Kyiv"})


@pytest.mark.parametrize(
    ("mode", "status", "code", "calls"),
    [
        ("slow", 524, "upstream-timeout", 1),
        ("500", 502, "upstream-error", 3),  # retried twice
        ("502", 502, "upstream-error", 3),
        ("garbage", 520, "upstream-bad-answer", 1),
        ("truncated", 520, "upstream-bad-answer", 1),
    ],
)
def test_provider_failures(
    pclient: TestClient, mode: str, status: int, code: str, calls: int
) -> None:
    fakes.MODE["nominatim"] = mode
    r = pclient.get(GEOCODE[0], params=GEOCODE[1])
    assert r.status_code == status
    error = assert_error(r.json(), code)
    assert error["detail"]["provider"] == "nominatim"
    assert len(fakes.CALLS["nominatim"]) == calls


def test_a_5xx_then_success_is_retried(pclient: TestClient) -> None:
    fakes.MODE["nominatim"] = "500once"
    r = pclient.get(GEOCODE[0], params=GEOCODE[1])
    assert r.status_code == 200
    assert len(fakes.CALLS["nominatim"]) == 2


def test_failures_are_not_cached(pclient: TestClient) -> None:
    fakes.MODE["nominatim"] = "garbage"
    assert pclient.get(GEOCODE[0], params=GEOCODE[1]).status_code == 520
    fakes.MODE["nominatim"] = "ok"
    assert pclient.get(GEOCODE[0], params=GEOCODE[1]).status_code == 200


def test_reset_connection(psettings: Settings, reset_server: fakes.ResetServer) -> None:
    url = f"http://127.0.0.1:{reset_server.port}/nominatim"
    with app_client(with_providers(psettings, nominatim={"url": url})) as tc:
        r = tc.get(GEOCODE[0], params=GEOCODE[1])
    assert r.status_code == 520
    assert_error(r.json(), "upstream-bad-answer")


def test_unreachable_provider(psettings: Settings) -> None:
    url = f"http://127.0.0.1:{free_port()}/nominatim"  # nothing listens there
    with app_client(with_providers(psettings, nominatim={"url": url})) as tc:
        r = tc.get(GEOCODE[0], params=GEOCODE[1])
    assert r.status_code == 521
    assert_error(r.json(), "upstream-unreachable")


@pytest.fixture
def full_backlog() -> Iterator[int]:
    """A port whose accept queue is full: a new connection is never established."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(8):
        c = socket.socket()
        c.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            c.connect(("127.0.0.1", port))
        fillers.append(c)
    yield port
    for c in fillers:
        c.close()
    server.close()


@pytest.mark.anyio
async def test_connect_timeout(settings: Settings, full_backlog: int) -> None:
    redis_client = aioredis.Redis.from_url(settings.redis_url)
    http = make_http_client(settings.model_copy(update={"provider_connect_timeout_s": 0.3}))
    upstream = Upstream(http, redis_client, retries=0)
    provider = Provider("nominatim", f"http://127.0.0.1:{full_backlog}", rate_per_s=1000)
    try:
        with pytest.raises(UpstreamConnectTimeoutError):
            await upstream.get_json(provider, "search", {"q": "x"})
    finally:
        await http.aclose()
        await redis_client.aclose()


def test_connect_timeout_status(psettings: Settings, full_backlog: int) -> None:
    url = f"http://127.0.0.1:{full_backlog}/nominatim"
    update = {"provider_connect_timeout_s": 0.3, "provider_retries": 0}
    unreachable = with_providers(psettings, nominatim={"url": url})
    with app_client(unreachable.model_copy(update=update)) as tc:
        r = tc.get(GEOCODE[0], params=GEOCODE[1])
    assert r.status_code == 522
    assert_error(r.json(), "upstream-connect-timeout")


@pytest.mark.anyio
async def test_rate_limit_is_shared_by_processes(settings: Settings, fake_base: str) -> None:
    """Two upstreams (two API processes) together never exceed the provider's rate."""
    rate = 5.0
    provider = Provider("nominatim", f"{fake_base}/nominatim", rate_per_s=rate)
    clients = [make_http_client(settings) for _ in range(2)]
    redis_clients = [aioredis.Redis.from_url(settings.redis_url) for _ in range(2)]
    upstreams = [Upstream(h, r) for h, r in zip(clients, redis_clients, strict=True)]
    try:
        await asyncio.gather(
            *(
                upstreams[i % 2].get_json(
                    provider, "search", {"format": "jsonv2", "q": f"place {i}"}
                )
                for i in range(8)
            )
        )
    finally:
        for h in clients:
            await h.aclose()
        for r in redis_clients:
            await r.aclose()
    times = sorted(t for t, _, _ in fakes.CALLS["nominatim"])
    assert len(times) == 8
    # slots are 1/rate apart on Redis's clock; the fake sees them with some scheduling
    # jitter (a loaded machine), so: no two calls close together, and k calls after the
    # first never earlier than k intervals (an unlimited burst would arrive all at once)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert min(gaps) > 0.5 / rate, gaps
    assert all(t - times[0] > k / rate - 0.1 for k, t in enumerate(times)), times


@pytest.mark.anyio
async def test_rate_limit_refuses_a_long_wait(settings: Settings, fake_base: str) -> None:
    provider = Provider("nominatim", f"{fake_base}/nominatim", rate_per_s=1)
    redis_client = aioredis.Redis.from_url(settings.redis_url)
    http = make_http_client(settings)
    upstream = Upstream(http, redis_client, rate_wait_s=0.5)
    try:
        await upstream.get_json(provider, "search", {"format": "jsonv2", "q": "a"})
        with pytest.raises(Exception, match="busy") as info:
            await upstream.get_json(provider, "search", {"format": "jsonv2", "q": "b"})
        assert info.type.__name__ == "UnavailableError"
    finally:
        await http.aclose()
        await redis_client.aclose()
    assert len(fakes.CALLS["nominatim"]) == 1


def test_the_key_stays_out_of_the_cache_key(psettings: Settings, pclient: TestClient) -> None:
    pclient.get("/api-user/reverse-geocode", params={"x": 30.5, "y": 50.4})
    import redis as sync_redis

    rdb = sync_redis.Redis.from_url(psettings.redis_url, decode_responses=True)
    keys = list(rdb.scan_iter("mapsvc:provider:*"))
    assert keys
    assert all("here-key" not in k and "here-key" not in (rdb.get(k) or "") for k in keys)


@pytest.mark.anyio
async def test_http_client_has_explicit_limits(psettings: Settings) -> None:
    http = make_http_client(psettings)
    try:
        assert http.timeout == httpx.Timeout(1.0, connect=0.5)
        assert not http.follow_redirects
    finally:
        await http.aclose()


def test_cache_ttl_is_the_providers(psettings: Settings, pclient: TestClient) -> None:
    import redis as sync_redis

    pclient.get("/api-user/weather", params={"x": 30.5, "y": 50.4})
    pclient.get(GEOCODE[0], params=GEOCODE[1])
    rdb = sync_redis.Redis.from_url(psettings.redis_url, decode_responses=True)
    (owm,) = rdb.scan_iter("mapsvc:provider:owm:*")
    (nominatim,) = rdb.scan_iter("mapsvc:provider:nominatim:*")
    assert (
        psettings.providers.owm.cache_ttl_s - 5
        < rdb.ttl(owm)
        <= psettings.providers.owm.cache_ttl_s
    )
    assert (
        psettings.providers.nominatim.cache_ttl_s - 5
        < rdb.ttl(nominatim)
        <= psettings.providers.nominatim.cache_ttl_s
    )
