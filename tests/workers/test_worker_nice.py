"""Worker processes run ``MAPSVC_WORKER_NICE`` nicer than their worker: bulk work (pre-tiling
chunks, jobs) yields the CPU to the tiles users wait for (docs/seeding.md "Priorities")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis

from api.app import create_app
from shared.priority import session_nice
from shared.settings import Settings
from tests.conftest import UP_REDIS_URL, admin_client, worker_process
from tests.jobs import wait_state

pytestmark = [pytest.mark.worker]


def nice_of(pid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, pid)


def test_a_worker_process_runs_at_the_configured_nice(settings: Settings, tmp_path: Path) -> None:
    # a Redis db of its own: no other worker takes the job
    mine = settings.model_copy(update={"redis_url": UP_REDIS_URL, "worker_nice": 7})
    redis.Redis.from_url(mine.redis_url).flushdb()
    ours, our_group = nice_of(0), session_nice()
    with worker_process(mine, tmp_path / "worker.log", concurrency=1) as proc:
        with admin_client(create_app(mine)) as tc:
            job_id = tc.post("/api-user/diag/probe?steps=1&delay_ms=1&async=1").json()["id"]
            job = wait_state(tc, job_id, timeout=60)
        assert job["state"] == "succeeded", job
        runner = int(job["worker"].rsplit(" ", 1)[1])
        assert runner != proc.pid
        # the process that ran the job is 7 nicer than the worker, which keeps its priority
        assert nice_of(proc.pid) == ours
        assert nice_of(runner) == min(ours + 7, 19)
    # started in this session, the worker left the session's group as it was
    assert session_nice() == our_group
