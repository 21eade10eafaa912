"""A worker process killed mid-job: the job is run again, or ends failed; never running forever."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import redis
from starlette.testclient import TestClient

from tests.jobs import job_lines, wait_running, wait_state
from tests.sse import read_job_lines

pytestmark = [pytest.mark.worker, pytest.mark.server]


def kill_runner(
    client: TestClient, rdb: redis.Redis, job_id: str, previous: str | None = None, starts: int = 1
) -> str:
    """SIGKILL the process running the job, once it is another than ``previous`` and the job
    has written its ``starts``-th start line (killed before it, a start would go unseen)."""
    deadline = time.monotonic() + 30
    while True:
        job = wait_running(client, job_id)
        started = sum(t.startswith("Probe start") for t in job_lines(rdb, job_id))
        if job["worker"] != previous and started >= starts or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert job["state"] == "running", job
    runner = job["worker"]
    os.kill(int(runner.rsplit(" ", 1)[1]), signal.SIGKILL)
    return str(runner)


def test_killed_job_is_run_again(
    client: TestClient, rdb: redis.Redis, live_server: str, worker: subprocess.Popen[bytes]
) -> None:
    job_id = client.post("/api-user/diag/probe?steps=20&delay_ms=100&async=1").json()["id"]
    first = kill_runner(client, rdb, job_id)
    job = wait_state(client, job_id, timeout=60)
    assert job["state"] == "succeeded", job
    assert job["worker"] != first
    texts = [f.data for f in read_job_lines(live_server, job_id)]
    assert sum(t.startswith("Probe start") for t in texts) == 2
    assert texts[-1] == "Finish:success"
    assert worker.poll() is None


def test_job_killed_twice_ends_failed(
    client: TestClient, rdb: redis.Redis, live_server: str, worker: subprocess.Popen[bytes]
) -> None:
    job_id = client.post("/api-user/diag/probe?steps=50&delay_ms=100&async=1").json()["id"]
    first = kill_runner(client, rdb, job_id)
    kill_runner(client, rdb, job_id, previous=first, starts=2)
    job = wait_state(client, job_id, timeout=60)
    assert job["state"] == "failed", job
    assert "started 3 times and its worker process died each time" in job["error"]["message"]
    texts = [f.data for f in read_job_lines(live_server, job_id, timeout=30)]
    assert sum(t.startswith("Probe start") for t in texts) == 2
    assert texts[-1].startswith("Finish:error: the job was started 3 times")
    assert worker.poll() is None
