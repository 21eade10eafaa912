"""The base of every job task: reporter, cancellation, final line and error handling."""

from __future__ import annotations

import functools
import logging
import os
import socket
from typing import Any

from celery import Task
from celery.exceptions import Ignore, SoftTimeLimitExceeded
from celery.signals import worker_process_init
from celery.states import REVOKED

from shared.errors import JobCancelledError, MapsvcError
from shared.jobs import Continued, JobReporter, JobStore
from shared.logs import JOB_ID, REQUEST_ID
from shared.redis_clients import sync_client
from workers.celery_app import REDIS_OUTAGE_S, settings

__all__ = ["JobTask", "job_store", "reset_store"]

log = logging.getLogger(__name__)


@functools.cache
def _store() -> JobStore:
    return JobStore(sync_client(settings.redis_url, outage_s=REDIS_OUTAGE_S), settings)


def job_store() -> JobStore:
    """The job store of this worker process."""
    return _store()


@worker_process_init.connect
def reset_store(**_: Any) -> None:
    """Forget the Redis connection: opened in the parent, it must not be shared with forked
    worker processes (run in each new one)."""
    _store.cache_clear()


class JobTask(Task):  # type: ignore[misc]
    """A job: its function gets a :class:`JobReporter` as first argument.

    Jobs are idempotent (outputs are written under a temporary name and renamed), so they are
    acknowledged late and put back on the queue when the process running them dies.
    """

    acks_late = True
    reject_on_worker_lost = True
    #: starts allowed when the process running the job dies (Redis re-delivers it each time)
    max_attempts = settings.jobs.max_attempts

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        job_id = self.request.id
        record = _store().get(job_id)
        # every line logged while the job runs names it, and the request that started it
        job_token = JOB_ID.set(job_id)
        request_token = REQUEST_ID.set((record.request_id or None) if record else None)
        try:
            return self._run_job(job_id, record.kind if record else self.name, *args, **kwargs)
        finally:
            JOB_ID.reset(job_token)
            REQUEST_ID.reset(request_token)

    def _run_job(self, job_id: str, kind: str, *args: Any, **kwargs: Any) -> Any:
        store = _store()
        report = JobReporter(store, job_id)
        if store.cancel_requested(job_id):
            report.fail(JobCancelledError("the job was cancelled before it started"))
            raise Ignore()
        attempts = store.count_attempt(job_id)
        if attempts > self.max_attempts:
            record = store.get(job_id)
            lost = record.worker if record else "unknown"
            report.fail(
                MapsvcError(
                    f"the job was started {attempts} times and its worker process died each"
                    f" time (last: {lost}); giving up",
                    attempts=attempts,
                )
            )
            return None
        worker = f"{self.request.hostname or socket.gethostname()} pid {os.getpid()}"
        report.start(worker, kind)
        log.info("job %s (%s) started, attempt %d", job_id, self.name, attempts)
        try:
            result = self.run(report, *args, **kwargs)
        except JobCancelledError as exc:
            report.fail(exc)
            self.update_state(state=REVOKED)
            raise Ignore() from exc
        except MapsvcError as exc:
            report.fail(exc)
            raise
        except SoftTimeLimitExceeded:
            limit = self.soft_time_limit or self.app.conf.task_soft_time_limit
            report.fail(MapsvcError(f"the job ran past its time limit ({limit}s)"))
            raise
        except Exception as exc:
            log.exception("job %s (%s) failed", job_id, self.name)
            report.fail(MapsvcError(f"internal error in the job: {type(exc).__name__}"))
            raise
        if isinstance(result, Continued):
            return result.detail  # the job goes on in other tasks, which end it
        report.succeed(result)
        log.info("job %s (%s) succeeded in %d ms", job_id, self.name, report.elapsed_ms)
        return result
