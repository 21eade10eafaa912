"""The API pointed at the fake providers (tests/conftest.py), and a clean slate per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from starlette.testclient import TestClient

from shared.settings import Settings
from tests.conftest import app_client
from tests.providers import fakes


@pytest.fixture(scope="session")
def reset_server() -> Iterator[fakes.ResetServer]:
    server = fakes.ResetServer()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _fresh_fakes(settings: Settings) -> None:
    """Each test starts with every fake answering normally, no calls seen, no cache."""
    fakes.MODE.clear()
    fakes.CALLS.clear()
    rdb = redis.Redis.from_url(settings.redis_url)
    for pattern in ("mapsvc:provider:*", "mapsvc:ratelimit:*"):
        for key in rdb.scan_iter(pattern):
            rdb.delete(key)


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
