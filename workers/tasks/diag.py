"""Diagnostic jobs: the pipeline probe."""

from __future__ import annotations

from typing import Any

from shared.diag import run_probe
from shared.jobs import JobReporter
from shared.queues import PROBE
from workers._job import JobTask
from workers.celery_app import app


@app.task(base=JobTask, name=PROBE.task, soft_time_limit=600, time_limit=660)
def probe(report: JobReporter, **params: Any) -> dict[str, Any]:
    """Run the pipeline probe (see :func:`shared.diag.run_probe`)."""
    job = PROBE.read(params)
    return run_probe(report, steps=job.steps, delay_ms=job.delay_ms, fail_at=job.fail_at)
