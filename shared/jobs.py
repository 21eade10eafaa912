"""Job records and the reporter a running job talks through.

A job is a Celery task id. Besides Celery's own state, the service keeps a small record per job
in Redis (kind, parameters, times, progress, the error message fit for a user, a cancel flag),
with the same TTL as the job's event lines. Whoever reads a job combines the two.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, cast

import redis

from shared import events
from shared.errors import JobCancelledError, MapsvcError
from shared.settings import Settings

__all__ = [
    "Continued",
    "FINISH_CANCELLED",
    "FINISH_ERROR",
    "FINISH_SUCCESS",
    "JobRecord",
    "JobReporter",
    "JobStore",
]

FINISH_SUCCESS = "Finish:success"
FINISH_CANCELLED = "Finish:cancelled"
FINISH_ERROR = "Finish:error"


@dataclass(frozen=True)
class Continued:
    """What a job returns when other tasks carry it on (a fan-out): it has not ended yet.

    The task that runs last ends the job with :meth:`JobReporter.succeed` or ``fail``.
    """

    detail: dict[str, Any]


def _record_key(job_id: str) -> str:
    return f"mapsvc:job:{job_id}"


@dataclass(frozen=True)
class JobRecord:
    """What the service knows of a job besides Celery's state."""

    id: str
    kind: str
    params: dict[str, Any]
    created: float
    started: float | None
    finished: float | None
    progress: float | None
    last_line: str | None
    cancel_requested: bool
    outcome: str | None
    result: Any
    error: dict[str, Any] | None
    worker: str | None


def _float(value: str | None) -> float | None:
    return float(value) if value else None


class JobStore:
    """Job records and event lines in Redis; the one place that writes them."""

    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.client = client
        self.ttl_s = settings.events_ttl_s
        self.maxlen = settings.events_maxlen

    def create(self, job_id: str, kind: str, params: dict[str, Any]) -> None:
        """Record a job as it is enqueued."""
        key = _record_key(job_id)
        mapping = {"kind": kind, "params": json.dumps(params), "created": repr(time.time())}
        pipe = self.client.pipeline()
        pipe.hset(key, mapping=cast(dict[Any, Any], mapping))
        pipe.expire(key, self.ttl_s)
        pipe.execute()

    def get(self, job_id: str) -> JobRecord | None:
        """The record of a job, or None when the service never made it (or it expired)."""
        data = cast(dict[str, str], self.client.hgetall(_record_key(job_id)))
        if not data:
            return None
        return JobRecord(
            id=job_id,
            kind=data["kind"],
            params=json.loads(data["params"]),
            created=float(data["created"]),
            started=_float(data.get("started")),
            finished=_float(data.get("finished")),
            progress=_float(data.get("progress")),
            last_line=data.get("last_line"),
            cancel_requested=data.get("cancel") == "1",
            outcome=data.get("outcome"),
            result=json.loads(data["result"]) if "result" in data else None,
            error=json.loads(data["error"]) if data.get("error") else None,
            worker=data.get("worker"),
        )

    def update(self, job_id: str, **fields: str | float) -> None:
        """Set fields of a job's record (only on a record that exists)."""
        key = _record_key(job_id)
        if self.client.exists(key):
            self.client.hset(key, mapping={str(k): str(v) for k, v in fields.items()})

    def count_attempt(self, job_id: str) -> int:
        """Count one more start of a job; returns how many times it has been started."""
        attempts: int = self.client.hincrby(_record_key(job_id), "attempts", 1)
        return attempts

    def request_cancel(self, job_id: str) -> None:
        """Flag a job as cancelled; a running job stops at its next line."""
        self.update(job_id, cancel="1")

    def cancel_requested(self, job_id: str) -> bool:
        """Whether a user asked to cancel the job."""
        return self.client.hget(_record_key(job_id), "cancel") == "1"

    def publish(self, job_id: str, text: str) -> str:
        """Write one progress line of a job (see :func:`shared.events.publish`)."""
        entry = events.publish(self.client, job_id, text, ttl_s=self.ttl_s, maxlen=self.maxlen)
        self.update(job_id, last_line=text)
        return entry

    def finish(
        self, job_id: str, outcome: str, text: str, error: MapsvcError | None = None
    ) -> str | None:
        """End a job: its outcome (and error), then its final line; only the first end counts.

        The record is complete before the final line appears, so whoever waits for that line
        reads the outcome.

        Args:
            job_id: the job.
            outcome: ``succeeded``, ``failed`` or ``cancelled``.
            text: the final line.
            error: the error of a failed job, as a user should read it.

        Returns:
            The entry id of the final line, or None when the job had already ended.
        """
        if not events.claim_final(self.client, job_id, self.ttl_s):
            return None
        fields: dict[str, str | float] = {"outcome": outcome, "finished": time.time()}
        if error is not None:
            body = {"code": error.code, "message": error.message, "detail": error.detail}
            fields["error"] = json.dumps(body, default=str)
        self.update(job_id, last_line=text, **fields)
        return events.publish(
            self.client, job_id, text, final=True, ttl_s=self.ttl_s, maxlen=self.maxlen
        )


class JobReporter:
    """How a running job reports: text lines with the elapsed milliseconds, and progress.

    Every line first checks the cancel flag, so a cancelled job stops at its next line with
    :class:`~shared.errors.JobCancelledError`.
    """

    def __init__(self, store: JobStore, job_id: str, started: float | None = None) -> None:
        self.store = store
        self.job_id = job_id
        # wall-clock, so that the parts of a job that fans out count from the same start
        self._t0 = time.time() if started is None else started

    @classmethod
    def of_running_job(cls, store: JobStore, job_id: str) -> JobReporter:
        """The reporter of a job started elsewhere (a chunk of a job that fans out)."""
        record = store.get(job_id)
        return cls(store, job_id, record.started if record and record.started else None)

    @property
    def elapsed_ms(self) -> int:
        """Milliseconds since the job started."""
        return int((time.time() - self._t0) * 1000)

    def line(self, text: str, *, progress: float | None = None, elapsed: bool = True) -> None:
        """Publish a progress line, ending with the elapsed ms unless ``elapsed`` is False.

        Args:
            text: the line.
            progress: fraction of the job done, 0 to 1, when known.
            elapsed: append `` <ms>ms`` (the spec's "elapsed time in milliseconds").

        Raises:
            JobCancelledError: a user cancelled the job.
        """
        if self.store.cancel_requested(self.job_id):
            raise JobCancelledError("the job was cancelled")
        self.store.publish(self.job_id, f"{text} {self.elapsed_ms}ms" if elapsed else text)
        if progress is not None:
            self.store.update(self.job_id, progress=round(min(max(progress, 0.0), 1.0), 4))

    def json(self, value: Any) -> None:
        """Publish a value as one JSON line (no elapsed time: the line must stay JSON)."""
        self.line(json.dumps(value, separators=(",", ":"), default=str), elapsed=False)

    def start(self, worker: str) -> None:
        """Mark the job as started (again, when a worker re-runs it) by ``worker``."""
        self._t0 = time.time()
        self.store.update(self.job_id, started=self._t0, worker=worker, progress=0.0)

    def succeed(self, result: Any) -> None:
        """Keep the job's result and write the final success line."""
        self.store.update(self.job_id, progress=1.0, result=json.dumps(result, default=str))
        self.store.finish(self.job_id, "succeeded", FINISH_SUCCESS)

    def fail(self, error: MapsvcError) -> None:
        """Keep the error and write the final failure (or cancellation) line."""
        if isinstance(error, JobCancelledError):
            self.store.finish(self.job_id, "cancelled", FINISH_CANCELLED)
            return
        self.store.finish(self.job_id, "failed", f"{FINISH_ERROR}: {error.message}", error)
