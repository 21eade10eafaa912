"""What the tests of the OGC web services (WMS, WMTS) share: the API they ask."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis
from starlette.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.layers import RGB, RGB_ID, WORLD, configure


@contextmanager
def ows_app(settings: Settings, rdb: redis.Redis) -> Iterator[TestClient]:
    """The API with the scene (public) and the world raster (private) configured."""
    for rel in (RGB, WORLD):
        configure(settings, rdb, rel)
    public = settings.model_copy(update={"public_layers": RGB_ID})
    with TestClient(create_app(public), raise_server_exceptions=False) as client:
        yield client
