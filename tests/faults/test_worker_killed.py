"""A worker process SIGKILLed mid-chunk of a pre-tiling run: the chunk is delivered again, the
counts equal the plan, no tile is missing or corrupt."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
import redis
from celery import Celery

from api.jobs import make_celery_client
from shared.settings import Settings
from shared.tiles.styles import read_style
from tests.faults.conftest import Api
from tests.faults.harness import ServiceProcess, cached_tiles, job_line_matches, planned_tiles
from tests.services import poll

pytestmark = [pytest.mark.worker, pytest.mark.server]

QUERY = "minzoom=8&maxzoom=13"


@pytest.fixture
def celery(fault_settings: Settings) -> Iterator[Celery]:
    """A Celery client of the tests' broker (to see what the worker runs)."""
    client = make_celery_client(fault_settings)
    yield client
    client.close()


def kill_mid_chunk(celery: Celery, rdb: redis.Redis, job_id: str) -> tuple[dict[str, Any], int]:
    """SIGKILL the pool process of a chunk of the run in its first start, before the chunk is
    counted: the chunk's task (as ``inspect().active()`` has it), and how many pool processes
    were killed in all (a chunk takes ~0.1 s: one may end between the look and the kill)."""
    counters = f"mapsvc:pretile:{job_id}"  # "attempt:<z>:<x0>:<y0>": starts of a chunk not counted

    def starts(task: dict[str, Any]) -> str | None:
        z, x0, y0 = task["args"][3:6]
        return cast(str | None, rdb.hget(counters, f"attempt:{z}:{x0}:{y0}"))

    kills, deadline = 0, time.monotonic() + 30
    while time.monotonic() < deadline:
        active = celery.control.inspect(timeout=2, limit=1).active() or {}
        running = [t for ts in active.values() for t in ts if t["name"] == "tiles.chunk"]
        task = next((t for t in running if starts(t) == "1"), None)
        if task is None:
            continue
        os.kill(task["worker_pid"], signal.SIGKILL)
        kills += 1
        if starts(task) == "1":  # still started once and not counted: it died mid-chunk
            return dict(task), kills
    raise AssertionError("no pool process was killed mid-chunk")


def test_worker_process_killed_mid_chunk(
    fault_api: Api,
    fault_settings: Settings,
    fault_rdb: redis.Redis,
    scene: str,
    celery: Celery,
    start_worker: Callable[[], ServiceProcess],
) -> None:
    worker = start_worker()
    api = fault_api.client
    plan = api.get(f"/api-user/gis-layer-pretile/{scene}?dryrun=1&{QUERY}").json()
    job_id = api.get(f"/api-user/gis-layer-pretile/{scene}?{QUERY}&async=1").json()["id"]
    poll(lambda: job_line_matches(fault_rdb, job_id, lambda t: "tiles/s" in t), 30, "progress")
    killed, kills = kill_mid_chunk(celery, fault_rdb, job_id)
    job = fault_api.wait_job(job_id, timeout=120)
    assert job["state"] == "succeeded", job
    result = job["result"]
    assert result["rendered"] + result["skipped"] == plan["total"]
    assert [(z["zoom"], z["rendered"] + z["skipped"], z["errors"]) for z in result["zooms"]] == [
        (z["zoom"], z["tiles"], 0) for z in plan["zooms"]
    ]
    # the killed chunk was delivered again (same task id), and counted once, by its second run
    z, x0, y0, x1, y1 = killed["args"][3:8]
    assert fault_rdb.sismember(f"mapsvc:pretile:{job_id}:chunks", f"{z}:{x0}:{y0}")
    log = worker.output()
    assert log.count(f"Task tiles.chunk[{killed['id']}] received") == 2, worker.tail()
    assert log.count(f"Task tiles.chunk[{killed['id']}] succeeded") == 1, worker.tail()
    # every tile of the plan is there and whole; the one thing a kill may leave is the
    # temporary file of the write it cut short (beside a tile of the chunk, for a single kill)
    bounds = read_style(fault_settings.dirs.mapnik, scene).footprint
    root = fault_settings.dirs.rtile / scene / "en"
    leftovers = sorted(root.rglob(".*.tmp"))
    assert len(leftovers) <= kills, leftovers
    chunk = {(z, tx, ty) for tx in range(x0, x1 + 1) for ty in range(y0, y1 + 1)}
    for path in leftovers:
        row = int(path.name[1:].split(".", 1)[0])  # .<y>.png.<hex>.tmp
        tile = (int(path.parent.parent.name), int(path.parent.name), row)
        assert kills > 1 or tile in chunk, path
        path.unlink()
    assert cached_tiles(fault_settings, scene) == planned_tiles(plan, bounds)
    assert worker.alive()
