"""``/metrics`` names every layer (its tile counts, its render times): an operator limited to
some layers gets ``403`` on each of its paths, the root's and each mount's (issue 33, 3)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from api.app import create_app
from shared import metrics
from shared.settings import Settings
from tests.checks import AUTH, assert_error
from tests.conftest import ROOT
from tests.layers import MOSAIC_ID, RGB_ID

PATHS = ("/metrics", "/api-user/metrics", "/api/v1/metrics")
#: a process that counted tile look-ups of two layers, as the API's render path does
_COUNTING = f"""
from shared import metrics
metrics.count_tile_lookup({MOSAIC_ID!r}, hit=True)
metrics.count_tile_lookup({RGB_ID!r}, hit=False)
"""


@pytest.fixture(scope="module")
def app(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The API over a metrics folder where another process counted tiles of two layers."""
    root = tmp_path_factory.mktemp("metrics")
    mine = settings.model_copy(update={"metrics_dir": str(root)})
    host_dir = root / socket.gethostname()
    host_dir.mkdir()
    env = {**os.environ, metrics.ENV: str(host_dir)}
    subprocess.run([sys.executable, "-c", _COUNTING], cwd=ROOT, env=env, check=True)
    assert list(host_dir.glob("*.db"))
    with TestClient(create_app(mine), raise_server_exceptions=False) as client:
        yield client


def _operator_key(app: TestClient, layers: list[str] | None) -> dict[str, str]:
    body = {"name": "metrics", "role": "operator", "layers": layers}
    r = app.post("/api-user/api-keys", json=body, headers=AUTH)
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['key']}"}


@pytest.mark.parametrize("path", PATHS)
def test_an_operator_limited_to_a_layer_gets_403_and_no_layer(app: TestClient, path: str) -> None:
    limited = _operator_key(app, [MOSAIC_ID])
    r = app.get(path, headers=limited)
    assert r.status_code == 403, r.text
    error = assert_error(r.json(), "forbidden")
    assert "not limited to some layers" in error["message"]
    for layer in (MOSAIC_ID, RGB_ID):
        assert layer not in r.text
    assert "mapsvc_" not in r.text


@pytest.mark.parametrize("path", PATHS)
def test_an_operator_of_every_layer_still_reads_them(app: TestClient, path: str) -> None:
    r = app.get(path, headers=_operator_key(app, None))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    lines = r.text.splitlines()
    for layer, result in ((MOSAIC_ID, "hit"), (RGB_ID, "miss")):
        series = f'mapsvc_tile_cache_requests_total{{layer="{layer}",result="{result}"}} 1.0'
        assert series in lines
