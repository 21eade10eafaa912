"""Job records and the reporter a running job talks through.

A job is a Celery task id. Besides Celery's own state, the service keeps a small record per job
in Redis (kind, parameters, times, progress, the error message fit for a user, a cancel flag, the
time of its last line), kept as long as the job's event lines: every write renews its TTL, and
nothing writes a record that does not exist. Whoever reads a job combines the two.

A started job that writes no line for ``MAPSVC_JOB_STALL_S`` has lost its worker (or its fan-out
stalled): :meth:`JobStore.end_if_stalled` ends it as failed, once, whoever notices first (the API
reading the job, or the workers' periodic watchdog).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any, cast

import redis

from shared import events, metrics
from shared.errors import JobCancelledError, MapsvcError, UnavailableError, error_from_code
from shared.settings import Settings

__all__ = [
    "COUNT_IF_EXISTS",
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


#: every record key (job ids are UUIDs), not the keys of their streams and guards
_RECORD_PATTERN = _record_key("????????-????-????-????-????????????")
#: the job ids by creation time (a sorted set), for the jobs collection; ids whose record has
#: expired are dropped from it as jobs are created
JOBS_INDEX = "mapsvc:jobs"

# KEYS: a job record. ARGV: its TTL, then field, value pairs. Writes only a record that exists
# (a write after it expired would leave a partial record with no TTL); returns whether it did.
_UPDATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""

#: KEYS: a hash. ARGV: a field, the hash's TTL. Adds 1 to the field of a hash that exists and
#: renews its TTL; 0 when the hash is gone (so that a late write leaves no key without a TTL).
COUNT_IF_EXISTS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local count = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('EXPIRE', KEYS[1], ARGV[2])
return count
"""


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
    heartbeat: float | None
    """When the job last started or wrote a line (None: not started)."""
    owner: str = ""
    """The id of the principal that started the job (``key:…``, ``user:…``)."""
    layer: str = ""
    """The layer the request that started the job named (empty: none)."""
    request_id: str = ""
    """The id of the request that started the job (empty: none)."""


def _float(value: str | None) -> float | None:
    return float(value) if value else None


class JobStore:
    """Job records and event lines in Redis; the one place that writes them."""

    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.client = client
        self.ttl_s = settings.jobs.events_ttl_s
        self.maxlen = settings.jobs.events_maxlen
        self._update = client.register_script(_UPDATE)
        self._count_attempt = client.register_script(COUNT_IF_EXISTS)

    def create(
        self,
        job_id: str,
        kind: str,
        params: dict[str, Any],
        owner: str = "",
        layer: str = "",
        request_id: str = "",
    ) -> None:
        """Record a job as it is enqueued: who started it, the layer it is about, the request
        that started it."""
        key, created = _record_key(job_id), time.time()
        mapping = {
            "kind": kind,
            "params": json.dumps(params),
            "created": repr(created),
            "owner": owner,
            "layer": layer,
            "request_id": request_id,
        }
        pipe = self.client.pipeline()
        pipe.hset(key, mapping=cast(dict[Any, Any], mapping))
        pipe.expire(key, self.ttl_s)
        pipe.zadd(JOBS_INDEX, {job_id: created})
        pipe.zremrangebyscore(JOBS_INDEX, "-inf", created - self.ttl_s)  # records gone by now
        pipe.execute()

    def job_ids(self, start: int, count: int, *, newest_first: bool = True) -> list[str]:
        """Ids of jobs by creation time, ``count`` of them from position ``start``."""
        end = start + count - 1
        if newest_first:
            ids = self.client.zrevrange(JOBS_INDEX, start, end)
        else:
            ids = self.client.zrange(JOBS_INDEX, start, end)
        return [i.decode() if isinstance(i, bytes) else str(i) for i in ids]

    def claim(
        self, kind: str, params: dict[str, Any], job_id: str, ttl_s: int, owner: str = ""
    ) -> str | None:
        """Claim a job's kind and parameters for ``job_id``, unless an identical job is unfinished.

        The claim is a key per hash of the kind and the normalised parameters, kept ``ttl_s``
        (the longest a job runs); a claim whose job has ended (or expired) is taken over.

        Args:
            kind: what the job does.
            params: the job's parameters (JSON).
            job_id: the id of the job about to be enqueued.
            ttl_s: how long the claim lasts.
            owner: who starts it; another principal's identical job is not joined (its record
                is not theirs to read).

        Returns:
            None when the claim is now ``job_id``'s; else the id of the unfinished identical job.
        """
        digest = hashlib.sha1(
            json.dumps([kind, params, owner], sort_keys=True).encode(), usedforsecurity=False
        ).hexdigest()
        key = f"mapsvc:dedup:{digest}"
        if self.client.set(key, job_id, nx=True, ex=ttl_s):
            return None
        running = cast(str | None, self.client.get(key))
        record = self.get(running) if running else None
        if record is not None and record.outcome is None:
            return record.id
        self.client.set(key, job_id, ex=ttl_s)
        return None

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
            heartbeat=_float(data.get("beat")),
            owner=data.get("owner", ""),
            layer=data.get("layer", ""),
            request_id=data.get("request_id", ""),
        )

    def update(self, job_id: str, **fields: str | float) -> None:
        """Set fields of a job's record and renew its TTL (only on a record that exists)."""
        pairs = [str(part) for item in fields.items() for part in item]
        self._update(keys=[_record_key(job_id)], args=[self.ttl_s, *pairs])

    def count_attempt(self, job_id: str) -> int:
        """Count one more start of a job; how many times it has been started (0: no record)."""
        key = _record_key(job_id)
        return int(self._count_attempt(keys=[key], args=["attempts", self.ttl_s]))

    def request_cancel(self, job_id: str) -> None:
        """Flag a job as cancelled; a running job stops at its next line."""
        self.update(job_id, cancel="1")

    def cancel_requested(self, job_id: str) -> bool:
        """Whether the job must stop: a user asked to cancel it, or it has already ended.

        A job ends without its worker when the watchdog ends it as stalled; the worker, should
        it still be running, then stops at its next line instead of writing after the end.
        """
        cancel, outcome = self.client.hmget(_record_key(job_id), ["cancel", "outcome"])
        return cancel == "1" or outcome is not None

    def publish(self, job_id: str, text: str) -> str:
        """Write one progress line of a job (see :func:`shared.events.publish`)."""
        entry = events.publish(self.client, job_id, text, ttl_s=self.ttl_s, maxlen=self.maxlen)
        self.update(job_id, last_line=text, beat=time.time())
        return entry

    def end_if_stalled(self, record: JobRecord, stall_s: float) -> bool:
        """End a started job that wrote no line for ``stall_s``, as failed, with a final line.

        Its worker process vanished (killed with the whole worker, say, so Celery does not know
        before its visibility timeout) or the tasks it fanned out stopped. Only the first end of
        a job counts (see :meth:`finish`), so whoever notices first ends it.

        Args:
            record: the job's record, as read.
            stall_s: the longest silence of a running job.

        Returns:
            Whether this call ended the job.
        """
        if record.outcome is not None or record.heartbeat is None:
            return False
        silent_s = time.time() - record.heartbeat
        if silent_s < stall_s:
            return False
        message = (
            f"the job stalled: no progress line for {int(silent_s)} s (limit {stall_s:g} s);"
            f" its worker ({record.worker or 'unknown'}) is gone or the tasks it started stopped"
        )
        error = UnavailableError(message, silent_s=int(silent_s))
        return self.finish(record.id, "failed", f"{FINISH_ERROR}: {message}", error) is not None

    def settle(
        self, record: JobRecord, *, failure: str | None, revoked: bool, stall_s: float
    ) -> JobRecord:
        """End an unfinished job whose end its tasks could not write; its record, as it is now.

        A job whose worker process died twice, or that was revoked before a worker ran it,
        ends in the task queue without the job writing its final line: this writes it, so that
        no job stays "running" and every event stream ends. A started job silent for
        ``stall_s`` is ended as failed (:meth:`end_if_stalled`).

        Args:
            record: the job's record, as read.
            failure: what the task queue says the job failed with (``Type: message``), if it did.
            revoked: the task queue revoked the job.
            stall_s: the longest silence of a running job.

        Returns:
            The record, read again when this (or anyone) may have ended the job.
        """
        if record.outcome is not None:
            return record
        if failure is not None:
            message = f"the job failed in its worker: {failure}"
            error = error_from_code("internal", message)
            self.finish(record.id, "failed", f"{FINISH_ERROR}: {message}", error)
        elif revoked:
            self.finish(record.id, "cancelled", FINISH_CANCELLED)
        elif not self.end_if_stalled(record, stall_s):
            return record
        return self.get(record.id) or record

    def end_stalled(self, stall_s: float) -> list[str]:
        """End every stalled job (see :meth:`end_if_stalled`); the ids of those it ended."""
        ended = []
        for key in self.client.scan_iter(match=_RECORD_PATTERN, count=1000, _type="HASH"):
            record = self.get(str(key).rsplit(":", 1)[1])
            if record is not None and self.end_if_stalled(record, stall_s):
                ended.append(record.id)
        return ended

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
        finished = time.time()
        fields: dict[str, str | float] = {"outcome": outcome, "finished": finished}
        if error is not None:
            body = {"code": error.code, "message": error.message, "detail": error.detail}
            fields["error"] = json.dumps(body, default=str)
        self.update(job_id, last_line=text, **fields)
        record = self.get(job_id)
        if record is not None:  # counted once: only the first end gets here
            metrics.JOBS_FINISHED.labels(record.kind, outcome).inc()
            since = record.started or record.created
            metrics.JOB_SECONDS.labels(record.kind, outcome).observe(max(finished - since, 0.0))
        return events.publish(
            self.client, job_id, text, final=True, ttl_s=self.ttl_s, maxlen=self.maxlen
        )


class JobReporter:
    """How a running job reports: text lines with the elapsed milliseconds, and progress.

    Every line first checks the cancel flag and the outcome, so a cancelled job (or one the
    watchdog already ended) stops at its next line with :class:`~shared.errors.JobCancelledError`.
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
            JobCancelledError: a user cancelled the job, or it has already ended (the
                watchdog ended it as stalled).
        """
        if self.cancelled():
            raise JobCancelledError("the job was cancelled")
        self.store.publish(self.job_id, f"{text} {self.elapsed_ms}ms" if elapsed else text)
        if progress is not None:
            self.store.update(self.job_id, progress=round(min(max(progress, 0.0), 1.0), 4))

    def cancelled(self) -> bool:
        """Whether a user cancelled the job (or it has already ended)."""
        return self.store.cancel_requested(self.job_id)

    def json(self, value: Any) -> None:
        """Publish a value as one JSON line (no elapsed time: the line must stay JSON)."""
        self.line(json.dumps(value, separators=(",", ":"), default=str), elapsed=False)

    def start(self, worker: str, kind: str) -> None:
        """Mark the job (of ``kind``) as started (again, when a worker re-runs it) by ``worker``."""
        self._t0 = time.time()
        self.store.update(self.job_id, started=self._t0, beat=self._t0, worker=worker, progress=0.0)
        metrics.JOBS_STARTED.labels(kind).inc()

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
