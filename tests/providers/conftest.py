"""Fake providers on loopback, and the API pointed at them with short timeouts."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import redis
import uvicorn
from pydantic import SecretStr
from starlette.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.conftest import free_port, with_providers
from tests.providers import fakes


@pytest.fixture(scope="session")
def fake_base() -> Iterator[str]:
    """The fake provider server (real HTTP on loopback) in a thread."""
    port = free_port()
    config = uvicorn.Config(fakes.fake_app(), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            httpx.get(f"{base}/nominatim/search?format=jsonv2&q=x")
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    yield base
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="session")
def reset_server() -> Iterator[fakes.ResetServer]:
    server = fakes.ResetServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def psettings(settings: Settings, fake_base: str) -> Settings:
    """Every provider configured to its fake, fast timeouts, tiny backoff."""
    fast = settings.model_copy(
        update={
            "provider_connect_timeout_s": 0.5,
            "provider_timeout_s": 1.0,
            "provider_backoff_s": 0.01,
            "provider_rate_wait_s": 5.0,
        }
    )
    keys = {"here": "here-key", "mapbox": "mapbox-key", "owm": "owm-key"}
    return with_providers(
        fast,
        **{
            name: {"url": f"{fake_base}/{name}", "rate_per_s": 1000.0}
            | ({"api_key": SecretStr(keys[name])} if name in keys else {})
            for name, _ in settings.providers
        },
    )


@pytest.fixture(autouse=True)
def _fresh_fakes(settings: Settings) -> None:
    """Each test starts with every fake answering normally, no calls seen, no cache."""
    fakes.MODE.clear()
    fakes.CALLS.clear()
    rdb = redis.Redis.from_url(settings.redis_url)
    for pattern in ("mapsvc:provider:*", "mapsvc:ratelimit:*"):
        for key in rdb.scan_iter(pattern):
            rdb.delete(key)


def app_client(settings: Settings) -> TestClient:
    """A client of the API with these settings (use as a context manager)."""
    return TestClient(create_app(settings), raise_server_exceptions=False)


@pytest.fixture(scope="session")
def pclient(psettings: Settings) -> Iterator[TestClient]:
    """The API with every provider pointed at its fake."""
    with app_client(psettings) as tc:
        yield tc


@pytest.fixture(scope="session")
def bare_client(settings: Settings) -> Iterator[TestClient]:
    """The API with no provider configured (the defaults)."""
    with app_client(settings) as tc:
        yield tc
