"""Pre-tiling across worker processes and the speed test, on a real worker."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from shared.raster.paths import encode_id
from shared.seeding.plan import chunks, plan_pretile
from shared.settings import Settings
from shared.tiles.styles import read_style
from tests.checks import assert_error
from tests.jobs import job_lines, wait_state
from tests.layers import configure, stored_tiles

pytestmark = pytest.mark.worker


def planned_tiles(
    settings: Settings, style: str, minzoom: int, maxzoom: int
) -> set[tuple[int, int, int]]:
    bounds = read_style(settings.dirs.mapnik, style).bounds
    assert bounds is not None
    plan = plan_pretile(bounds, minzoom, maxzoom)
    return {(t.z, t.x, t.y) for c in chunks(bounds, plan) for t in c.tiles()}


def test_dryrun_plans_under_the_cap(
    client: TestClient, settings: Settings, raster_dir: Path, rdb: redis.Redis
) -> None:
    world = configure(settings, rdb, "single/world.rgb.tif")
    plan = client.get(f"/api-user/gis-layer-pretile/{world}?dryrun=1").json()
    assert (plan["minzoom"], plan["maxzoom"], plan["cap"]) == (6, 16, 100000)
    assert [(z["zoom"], z["tiles"], z["tiled"]) for z in plan["zooms"][:4]] == [
        (6, 4096, True),
        (7, 16384, True),
        (8, 65536, True),
        (9, 262144, False),
    ]
    assert plan["total"] == 4096 + 16384 + 65536
    assert plan["cut"] == list(range(9, 16))
    # the first zoom is tiled whole even above the cap; the next one does not fit
    big = client.get(f"/api-user/gis-layer-pretile/{world}?dryrun=1&minzoom=9&maxzoom=11").json()
    assert [(z["zoom"], z["tiled"]) for z in big["zooms"]] == [(9, True), (10, False)]
    assert big["total"] == 262144
    assert big["cut"] == [10]


def test_pretile_renders_every_planned_tile_then_skips_them(
    client: TestClient,
    settings: Settings,
    rdb: redis.Redis,
    scene: str,
    worker: subprocess.Popen[bytes],
) -> None:
    r = client.get(f"/api-user/gis-layer-pretile/{scene}?minzoom=8&maxzoom=11")
    assert r.status_code == 200, r.text
    result = r.json()
    expected = planned_tiles(settings, scene, 8, 11)
    assert len(expected) == 6 + 20 + 56
    assert [(z["zoom"], z["tiles"], z["rendered"], z["skipped"]) for z in result["zooms"]] == [
        (8, 6, 6, 0),
        (9, 20, 20, 0),
        (10, 56, 56, 0),
    ]
    assert result["rendered"] == 82
    assert result["skipped"] == 0
    assert 0 < result["empty"] < 82  # tiles in the scene's box but beside its rotated edges
    assert result["seconds"] > 0
    assert stored_tiles(settings, scene) == expected
    lines = job_lines(rdb, r.headers["x-job-id"])
    # the one worker of the tests did every chunk the run announced
    chunks = next(int(line.split()[1]) for line in lines if line.startswith("Chunks: "))
    assert list(result["workers"].values()) == [{"chunks": chunks, "rendered": 82}]
    assert lines[-1] == "Finish:success"
    progress = [
        line
        for line in lines
        if re.match(r"Zoom 10: \d+/56 tiles, [\d.]+ tiles/s, ETA \d+s \d+ms$", line)
    ]
    assert progress
    assert progress[-1].startswith("Zoom 10: 56/56 tiles")
    again = client.get(f"/api-user/gis-layer-pretile/{scene}?minzoom=8&maxzoom=11").json()
    assert (again["rendered"], again["skipped"]) == (0, 82)
    fresh = client.get(f"/api-user/gis-layer-pretile/{scene}?minzoom=8&maxzoom=11&nocache=1").json()
    assert (fresh["rendered"], fresh["skipped"]) == (82, 0)


def test_pretile_can_be_cancelled(
    client: TestClient,
    settings: Settings,
    rdb: redis.Redis,
    scene: str,
    worker: subprocess.Popen[bytes],
) -> None:
    job = client.get(f"/api-user/gis-layer-pretile/{scene}?minzoom=8&maxzoom=14&async=1").json()
    deadline = time.monotonic() + 60
    while not any(
        line.startswith("Zoom 1") and "tiles/s" in line for line in job_lines(rdb, job["id"])
    ):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert client.delete(f"/api-user/jobs/{job['id']}").status_code == 202
    done = wait_state(client, job["id"], timeout=60)
    assert done["state"] == "cancelled"
    assert job_lines(rdb, job["id"])[-1] == "Finish:cancelled"
    assert len(stored_tiles(settings, scene)) < len(planned_tiles(settings, scene, 8, 14))


def test_a_killed_worker_process_loses_no_tile(
    client: TestClient,
    settings: Settings,
    rdb: redis.Redis,
    scene: str,
    worker: subprocess.Popen[bytes],
) -> None:
    job = client.get(f"/api-user/gis-layer-pretile/{scene}?minzoom=8&maxzoom=13&async=1").json()
    deadline = time.monotonic() + 60
    while not any("tiles/s" in line for line in job_lines(rdb, job["id"])):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # a pool process (not the worker's embedded beat, also a child of the worker)
    stats = client.app.state.services.jobs.celery.control.inspect(timeout=5).stats()  # type: ignore[attr-defined]
    pool = next(iter(stats.values()))["pool"]["processes"]
    os.kill(int(pool[0]), signal.SIGKILL)
    done = wait_state(client, job["id"], timeout=180)
    assert done["state"] == "succeeded", done
    planned = planned_tiles(settings, scene, 8, 13)
    assert len(planned) == 6 + 20 + 56 + 195 + 700
    assert stored_tiles(settings, scene) == planned
    # every tile counted once, though a chunk ran again after its process died
    assert done["result"]["rendered"] + done["result"]["skipped"] == len(planned)
    assert worker.poll() is None


@pytest.mark.parametrize(
    ("query", "status"),
    [
        ("minzoom=10&maxzoom=10", 400),
        ("minzoom=12&maxzoom=8", 400),
        ("maxzoom=30", 400),
        ("minzoom=abc", 400),
        ("minzoom=-1", 400),
    ],
)
def test_pretile_bad_zooms(
    client: TestClient,
    settings: Settings,
    rdb: redis.Redis,
    raster_dir: Path,
    query: str,
    status: int,
) -> None:
    style = configure(settings, rdb, "single/RGB.byte.tif")
    r = client.get(f"/api-user/gis-layer-pretile/{style}?{query}")
    assert r.status_code == status
    assert_error(r.json(), "invalid-input")


def test_pretile_unknown_layer_is_404(client: TestClient) -> None:
    r = client.get(f"/api-user/gis-layer-pretile/{encode_id('nope')}?dryrun=1")
    assert r.status_code == 404


def test_speed_test_reports_per_zoom(
    client: TestClient, rdb: redis.Redis, scene: str, worker: subprocess.Popen[bytes]
) -> None:
    r = client.get(f"/api-user/gis-speed-test?layer={scene}")
    assert r.status_code == 200, r.text
    summary = r.json()
    assert summary["style"] == scene
    assert summary["sample_per_zoom"] == 12
    zooms = [z["zoom"] for z in summary["zooms"]]
    assert zooms == list(range(zooms[0], zooms[0] + 6))
    for entry in summary["zooms"]:
        assert 1 <= entry["tiles"] <= 12
        for kind in ("cold", "cached"):
            stats = entry[kind]
            assert 0 < stats["p50_ms"] <= stats["p95_ms"]
            assert stats["tiles_per_s"] > 0
        assert entry["cached"]["p50_ms"] < entry["cold"]["p50_ms"]
    lines = job_lines(rdb, r.headers["x-job-id"])
    assert lines[-1] == "Finish:success"
    assert json.loads(lines[-2]) == summary
    per_zoom = [line for line in lines if re.match(r"Zoom \d+: \d+ tiles, cold p50 ", line)]
    assert len(per_zoom) == 6


def test_speed_test_needs_a_known_layer(client: TestClient) -> None:
    assert client.get("/api-user/gis-speed-test").status_code == 400
    assert client.get(f"/api-user/gis-speed-test?layer={encode_id('nope')}").status_code == 404
