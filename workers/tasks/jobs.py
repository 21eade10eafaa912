"""Housekeeping of the job pipeline: the watchdog that ends stalled jobs."""

from __future__ import annotations

from shared.queues import WATCHDOG_TASK
from workers._job import job_store
from workers.celery_app import app, settings


@app.task(name=WATCHDOG_TASK, ignore_result=True, soft_time_limit=60, time_limit=90)
def watchdog() -> list[str]:
    """End every job silent for ``MAPSVC_JOB_STALL_S`` (see ``JobStore.end_stalled``).

    Run by the beat embedded in ``mapsvc worker``; idempotent, so several beats may run it.
    """
    return job_store().end_stalled(settings.jobs.stall_s)
