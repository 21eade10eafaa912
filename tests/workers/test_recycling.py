"""Worker recycling: a process is replaced after ``MAPSVC_WORKER_MAX_TASKS_PER_CHILD`` tasks."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from api.app import create_app
from shared.settings import Settings
from tests.conftest import UP_REDIS_URL, admin_client, worker_process
from tests.jobs import wait_state

pytestmark = [pytest.mark.worker]


def test_a_worker_process_is_replaced_after_its_tasks(settings: Settings, tmp_path: Path) -> None:
    # a Redis db of its own: no other worker takes these jobs
    mine = settings.model_copy(update={"redis_url": UP_REDIS_URL, "worker_max_tasks_per_child": 1})
    redis.Redis.from_url(mine.redis_url).flushdb()
    with worker_process(mine, tmp_path / "worker.log", concurrency=1) as proc:
        with admin_client(create_app(mine)) as tc:
            runners = []
            for _ in range(3):
                job_id = tc.post("/api-user/diag/probe?steps=1&delay_ms=1&async=1").json()["id"]
                job = wait_state(tc, job_id, timeout=60)
                assert job["state"] == "succeeded", job
                runners.append(job["worker"])
        # one process at a time, each replaced after its one task: three processes
        assert len(set(runners)) == 3, runners
        assert proc.poll() is None
