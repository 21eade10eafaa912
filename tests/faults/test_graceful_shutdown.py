"""SIGTERM to a worker mid-job: it ends the tasks it runs and puts back the rest; a worker
started afterwards finishes the job."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
import redis

from shared.settings import Settings
from shared.tiles.styles import read_style
from tests.faults.conftest import Api
from tests.faults.harness import ServiceProcess, cached_tiles, job_line_matches, planned_tiles
from tests.services import poll
from tests.sse import read_job_lines

pytestmark = [pytest.mark.worker, pytest.mark.server]

QUERY = "minzoom=8&maxzoom=13"


def test_sigterm_puts_the_unfinished_work_back(
    fault_api: Api,
    fault_settings: Settings,
    fault_rdb: redis.Redis,
    scene: str,
    start_worker: Callable[[], ServiceProcess],
) -> None:
    first = start_worker()
    api = fault_api.client
    plan = api.get(f"/api-user/gis-layer-pretile/{scene}?dryrun=1&{QUERY}").json()
    job_id = api.get(f"/api-user/gis-layer-pretile/{scene}?{QUERY}&async=1").json()["id"]
    poll(lambda: job_line_matches(fault_rdb, job_id, lambda t: "tiles/s" in t), 30, "progress")
    first.signal(signal.SIGTERM)
    assert first.wait(timeout=60) == 0, first.tail()  # a warm shutdown: its tasks ended
    assert "Warm shutdown" in first.output()
    assert "WorkerLostError" not in first.output()  # no task was cut short
    # the job is not over: its chunks not run yet wait in the queue, none is parked unacked
    job = fault_api.job(job_id)
    assert (job["state"], job["progress"] < 1) == ("running", True), job
    assert fault_rdb.llen("tiles") > 0
    assert fault_rdb.hlen("unacked") == 0
    second = start_worker()
    job = fault_api.wait_job(job_id, timeout=120)
    assert job["state"] == "succeeded", job
    texts = [frame.data for frame in read_job_lines(fault_api.base, job_id, timeout=30)]
    assert texts[-1] == "Finish:success"
    result = job["result"]
    assert result["rendered"] + result["skipped"] == plan["total"]
    assert [(z["zoom"], z["rendered"] + z["skipped"], z["errors"]) for z in result["zooms"]] == [
        (z["zoom"], z["tiles"], 0) for z in plan["zooms"]
    ]
    # both workers did part of it (one Celery name: its counts are the sum of both)
    assert "Task tiles.chunk[" in first.output()
    assert "Task tiles.chunk[" in second.output()
    bounds = read_style(fault_settings.dirs.mapnik, scene).footprint
    assert cached_tiles(fault_settings, scene) == planned_tiles(plan, bounds)
