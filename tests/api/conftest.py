"""Fixtures of the API tests: the shared raster layers, configured once per module."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from shared.settings import Settings
from tests.layers import RGB, configure, own_layer


@pytest.fixture(scope="module")
def layers(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> None:
    """The Landsat scene, the folder of its quarters and the world raster, configured."""
    for rel in (RGB, "bahamas-tiles", "single/world.rgb.tif"):
        configure(settings, rdb, rel)


@pytest.fixture
def scene(
    settings: Settings, rdb: redis.Redis, raster_dir: Path, request: pytest.FixtureRequest
) -> str:
    """A layer of the test's own (a copy of the Landsat scene, in a folder named for the test's
    module): no other test caches or removes its tiles."""
    folder = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    name = f"{request.node.name[:40]}.tif".replace("[", "_").replace("]", "_")
    return own_layer(settings, rdb, RGB, folder, name)
