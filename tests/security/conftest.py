"""The API of the access tests: layers A and B configured, jobs recorded but never sent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from api.app import create_app
from shared.seeding.export import export_folder
from shared.settings import Settings
from tests.layers import MOSAIC_ID, configure
from tests.security.test_grants import A_RASTER, B_RASTER, OTHER_PATH_VALUES


@pytest.fixture(scope="module")
def app(
    settings: Settings, rdb: redis.Redis, raster_dir: Path, vector_tables: str
) -> Iterator[TestClient]:
    """The API (no credentials unless a request sends some) with A and B configured."""
    for rel in (A_RASTER, B_RASTER):
        configure(settings, rdb, rel)
    exports = export_folder(settings.dirs.exports, MOSAIC_ID)
    exports.mkdir(parents=True, exist_ok=True)
    (exports / OTHER_PATH_VALUES["name"]).write_bytes(b"PMTiles\x03")
    # an event stream ends after a second: the tests read a layer's stream (which never ends
    # by itself) whole, as every other answer
    short = settings.model_copy(update={"sse_max_duration_s": 1.0})
    with TestClient(create_app(short), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def no_tasks(app: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs are recorded but their tasks never sent: no worker runs them, whatever the test."""
    celery = app.app.state.services.jobs.celery  # type: ignore[attr-defined]
    monkeypatch.setattr(celery, "send_task", lambda *args, **kwargs: None)
