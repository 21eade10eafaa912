"""Fixtures of the API tests: the shared raster layers, configured once per module."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from shared.settings import Settings
from tests.layers import RGB, configure


@pytest.fixture(scope="module")
def layers(settings: Settings, rdb: redis.Redis, raster_dir: Path) -> None:
    """The Landsat scene, the folder of its quarters and the world raster, configured."""
    for rel in (RGB, "bahamas-tiles", "single/world.rgb.tif"):
        configure(settings, rdb, rel)
