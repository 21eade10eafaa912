"""Following jobs in tests: waiting on their state through the API, reading their streams."""

from __future__ import annotations

import time
from typing import Any, cast

import redis
from starlette.testclient import TestClient

from shared import events

__all__ = ["TERMINAL", "job_lines", "wait_running", "wait_state"]

TERMINAL = {"succeeded", "failed", "cancelled"}


def wait_state(client: TestClient, job_id: str, timeout: float = 30) -> dict[str, Any]:
    """The job's descriptor once it has ended (or as it is when ``timeout`` s have passed)."""
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = client.get(f"/api-user/jobs/{job_id}").json()
        if job["state"] in TERMINAL or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


def wait_running(client: TestClient, job_id: str, timeout: float = 30) -> dict[str, Any]:
    """The job's descriptor once a worker runs it (or as it is after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = client.get(f"/api-user/jobs/{job_id}").json()
        if job["state"] == "running" and job["worker"] or time.monotonic() > deadline:
            return job
        time.sleep(0.05)


def job_lines(rdb: redis.Redis, job_id: str) -> list[str]:
    """The texts of the job's event stream, read straight from Redis (``decode_responses``)."""
    entries = cast(list[tuple[str, dict[str, str]]], rdb.xrange(events.job_stream(job_id)))
    return [fields["text"] for _, fields in entries]
