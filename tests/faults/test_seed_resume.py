"""Every worker SIGKILLed mid-run, new ones started: the run is resumed and finishes with counts
equal to its plan, and the chunks done before the kill are not made again."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from shared.settings import Settings
from shared.tiles.styles import read_style
from tests.faults.conftest import Api
from tests.faults.harness import ServiceProcess, cached_tiles, job_line_matches, planned_tiles
from tests.services import poll

pytestmark = [pytest.mark.worker, pytest.mark.server]

QUERY = "minzoom=8&maxzoom=14"


def kill_every_process(worker: ServiceProcess) -> None:
    """SIGKILL the worker's pool processes and the worker itself, at once (a host lost)."""
    children = Path(f"/proc/{worker.pid}/task/{worker.pid}/children").read_text().split()
    for pid in [int(c) for c in children]:
        os.kill(pid, signal.SIGKILL)
    worker.signal(signal.SIGKILL)
    worker.wait(30)
    for pid in [int(c) for c in children]:
        poll(lambda pid=pid: not Path(f"/proc/{pid}").exists(), 10, f"process {pid} gone")


def tile_times(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime for p in root.rglob("*.png")}


def test_a_run_whose_workers_were_all_killed_is_resumed_and_ends_with_counts_equal_to_its_plan(
    fault_api: Api,
    fault_settings: Settings,
    fault_rdb: redis.Redis,
    scene: str,
    start_worker: Callable[[], ServiceProcess],
) -> None:
    api = fault_api.client
    worker = start_worker()
    plan = api.get(f"/api-user/gis-layer-pretile/{scene}?dryrun=1&{QUERY}").json()
    assert plan["total"] > 1000, plan
    old = api.get(f"/api-user/gis-layer-pretile/{scene}?{QUERY}&async=1").json()["id"]
    counters = f"mapsvc:pretile:{old}"

    def done_before() -> int:
        return int(fault_rdb.hget(counters, "finished_tiles") or 0)

    poll(lambda: done_before() >= 300, 60, "300 tiles done")
    kill_every_process(worker)
    done = done_before()
    assert 0 < done < plan["total"], (done, plan["total"])
    root = fault_settings.dirs.rtile / scene / "en"
    before = tile_times(root)
    clean = fault_rdb.smembers(f"{counters}:chunks")

    start_worker()  # a new host: its watchdog ends the silent job, then a resume continues it
    job = fault_api.wait_job(old, timeout=60)
    assert job["state"] == "failed", job
    assert "stalled" in job["error"]["message"]
    r = api.post(f"/api-user/seeds/{old}/resume?async=1")
    assert r.status_code == 202, r.text
    new = r.json()["id"]
    job = fault_api.wait_job(new, timeout=180)
    assert job["state"] == "succeeded", job
    result = job["result"]

    # counts = plan: what the old run did clean, and what the new one made or found
    assert result["resumed_of"] == old
    assert result["resumed"] + result["rendered"] + result["skipped"] == plan["total"]
    assert result["failed"] == 0
    assert result["failed_tiles"] == []
    assert [(z["zoom"], z["resumed"] + z["rendered"] + z["skipped"]) for z in result["zooms"]] == [
        (z["zoom"], z["tiles"]) for z in plan["zooms"]
    ]
    assert result["resumed"] > 0
    # the chunks done clean before the kill were not made again: their files are untouched
    after = tile_times(root)
    kept = [
        name
        for name in before
        if f"{name.split('/')[0]}:{int(name.split('/')[1]) // 8 * 8}:"
        f"{int(name.split('/')[2].split('.')[0]) // 8 * 8}" in clean
    ]
    assert kept, "no tile of a chunk done before the kill"
    assert all(after[name] == before[name] for name in kept)
    bounds = read_style(fault_settings.dirs.mapnik, scene).footprint
    for leftover in root.rglob(".*.tmp"):  # a write the kill cut short
        leftover.unlink()
    assert cached_tiles(fault_settings, scene) == planned_tiles(plan, bounds)
    # the new job's lines say what it took over
    assert job_line_matches(fault_rdb, new, lambda t: t.startswith(f"Resumed job {old}: "))

    # nothing is left to resume: the layer's last run succeeded; the old one is not its last
    r = api.post(f"/api-user/seeds/{new}/resume")
    assert r.status_code == 409, r.text
    assert r.json()["error"]["detail"]["job_id"] == new
    r = api.post(f"/api-user/seeds/{old}/resume")
    assert r.status_code == 409, r.text
    assert r.json()["error"]["detail"]["job_id"] == new


def test_a_run_that_is_going_is_not_resumed(
    fault_api: Api, scene: str, start_worker: Callable[[], ServiceProcess]
) -> None:
    api = fault_api.client
    r = api.post(f"/api-user/seeds/{uuid.uuid4()}/resume")
    assert r.status_code == 404, r.text  # no such run
    start_worker()
    job_id = api.get(f"/api-user/gis-layer-pretile/{scene}?{QUERY}&async=1").json()["id"]
    poll(lambda: api.get(f"/api-user/jobs/{job_id}").json()["state"] == "running", 30, "running")
    r = api.post(f"/api-user/seeds/{job_id}/resume")
    assert r.status_code == 409, r.text
    assert r.json()["error"]["detail"]["job_id"] == job_id
    assert api.get(f"/api-user/jobs/{job_id}").json()["state"] == "running"  # untouched
    api.delete(f"/api-user/jobs/{job_id}")
    assert fault_api.wait_job(job_id, timeout=60)["state"] == "cancelled"
    # a cancelled run is resumed: the new job makes what the cancellation left
    r = api.post(f"/api-user/seeds/{job_id}/resume?async=1")
    assert r.status_code == 202, r.text
    job = fault_api.wait_job(r.json()["id"], timeout=180)
    assert job["state"] == "succeeded", job
    result = job["result"]
    assert result["resumed"] + result["rendered"] + result["skipped"] == result["plan"]["total"]
