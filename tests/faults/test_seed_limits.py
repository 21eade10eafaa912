"""A worker's seeding limits: at most MAPSVC_SEED_MAX_CONCURRENT_RUNS runs at once (the others
wait, queued, and then go); a run past MAPSVC_SEED_MAX_FAILED_TILES stops, listing them."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from shared.demo import DEMO_DATA
from shared.settings import Settings
from tests.faults.conftest import Api
from tests.faults.harness import ServiceProcess, job_line_matches
from tests.layers import RGB, configure
from tests.services import poll

pytestmark = [pytest.mark.worker, pytest.mark.server]

QUERY = "minzoom=8&maxzoom=13"
LIMITS = {"MAPSVC_SEED_MAX_CONCURRENT_RUNS": "1", "MAPSVC_SEED_MAX_FAILED_TILES": "3"}


def other_layer(settings: Settings, rdb: redis.Redis, name: str) -> str:
    folder = settings.dirs.raster / "pretile"
    folder.mkdir(exist_ok=True)
    shutil.copyfile(DEMO_DATA / "raster" / RGB, folder / name)
    return configure(settings, rdb, f"pretile/{name}")


def test_a_run_beyond_the_most_at_once_waits_queued_then_goes(
    fault_api: Api,
    fault_settings: Settings,
    fault_rdb: redis.Redis,
    scene: str,
    start_worker: Callable[..., ServiceProcess],
) -> None:
    api = fault_api.client
    start_worker(**LIMITS)
    second_layer = other_layer(fault_settings, fault_rdb, "limits-second.tif")
    # the first run paced, so that its chunks do not fill the queue the second's start is in
    paced = "minzoom=8&maxzoom=11&max_tiles_per_s=20&async=1"
    first = api.get(f"/api-user/gis-layer-pretile/{scene}?{paced}").json()["id"]
    poll(lambda: job_line_matches(fault_rdb, first, lambda t: "tiles/s" in t), 60, "first going")
    small = "minzoom=8&maxzoom=11&async=1"
    second = api.get(f"/api-user/gis-layer-pretile/{second_layer}?{small}").json()["id"]
    poll(
        lambda: job_line_matches(fault_rdb, second, lambda t: t.startswith("Queued: ")),
        30,
        "queued",
    )
    # while the first goes, the second makes nothing
    waited = 0
    while api.get(f"/api-user/jobs/{first}").json()["state"] == "running":
        assert not fault_rdb.hget(f"mapsvc:pretile:{second}", "finished_tiles")
        assert api.get(f"/api-user/jobs/{second}").json()["state"] == "running"
        waited += 1
        time.sleep(0.2)
    assert waited > 0
    assert fault_api.wait_job(first, timeout=10)["state"] == "succeeded"
    job = fault_api.wait_job(second, timeout=180)
    assert job["state"] == "succeeded", job
    assert job["result"]["rendered"] == job["result"]["plan"]["total"]
    assert fault_rdb.zcard("mapsvc:pretile-runs") == 0  # both places freed


def test_a_run_past_its_failed_tiles_stops_and_lists_them(
    fault_api: Api,
    fault_settings: Settings,
    scene: str,
    start_worker: Callable[..., ServiceProcess],
) -> None:
    api = fault_api.client
    start_worker(**LIMITS)
    zoom_10: Path = fault_settings.dirs.rtile / scene / "en" / "10"
    zoom_10.parent.mkdir(parents=True, exist_ok=True)
    zoom_10.write_text("not a folder")  # no tile of zoom 10 can be written
    job_id = api.get(f"/api-user/gis-layer-pretile/{scene}?{QUERY}&async=1").json()["id"]
    job = fault_api.wait_job(job_id, timeout=180)
    zoom_10.unlink()
    assert job["state"] == "failed", job
    error = job["error"]
    assert "tiles failed, more than 3 (MAPSVC_SEED_MAX_FAILED_TILES)" in error["message"]
    failed = error["detail"]["failed_tiles"]
    assert len(failed) > 3
    assert all(t.startswith("10/") for t in failed)
    assert len(failed) == len(set(failed))
