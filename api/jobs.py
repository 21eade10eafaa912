"""Jobs seen from the API: enqueue, describe, list, cancel and wait, for a :class:`JobView`
(who looks, what they see, how links are written), never for a request: the heavy-endpoint
reply that puts them together is ``api.job_reply``'s.

Waits and event streams block on Redis reads: they take their connections from a bounded pool of
their own (``MAPSVC_STREAM_REDIS_MAX_CONNECTIONS``), so they never take those of other requests;
when the pool is exhausted they are refused with ``503`` and ``Retry-After``.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis
from celery import Celery
from celery.result import AsyncResult
from starlette.concurrency import run_in_threadpool

from shared import events
from shared.auth.principal import Principal
from shared.errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    TooManyRequestsError,
    UnavailableError,
)
from shared.jobs import FINISH_CANCELLED, JobRecord, JobStore
from shared.jobs_access import check_may_see, may_see
from shared.logs import REQUEST_ID
from shared.queues import celery_config
from shared.redis_clients import blocking_pool, held_client
from shared.seeding.pretile import free_run
from shared.settings import Settings

__all__ = [
    "JOB_STATES",
    "MAX_JOBS_SCANNED",
    "JobSelection",
    "JobService",
    "JobView",
    "check_job_id",
    "make_celery_client",
]

_JOB_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_CELERY_STATES = {
    "PENDING": "queued",
    "RECEIVED": "queued",
    "STARTED": "running",
    "RETRY": "running",
    # a job whose task returned while other tasks carry it on (pre-tiling) has no outcome yet
    "SUCCESS": "running",
    "FAILURE": "failed",
    "REVOKED": "cancelled",
}
#: the Celery states of a job that no worker has started, nor will once it is revoked
_NOT_STARTED = ("PENDING", "REVOKED")
_TICK_S = 1.0
#: what a client refused for want of a free SSE slot is told to wait
_SSE_RETRY_AFTER_S = 5


def make_celery_client(settings: Settings) -> Celery:
    """A Celery app used only to send tasks (by name) and to read their state."""
    client = Celery("mapsvc")
    client.config_from_object(celery_config(settings))
    return client


#: the states of a job descriptor
JOB_STATES = ("queued", "running", "succeeded", "failed", "cancelled")
#: the most jobs one listing looks at (newest or oldest first), whatever it selects
MAX_JOBS_SCANNED = 2000


@dataclass(frozen=True)
class JobSelection:
    """What a listing of the jobs collection selects, in which order, which page."""

    kind: str | None = None
    state: str | None = None
    layer: str | None = None
    newest_first: bool = True
    limit: int = 50
    offset: int = 0

    def matches(self, record: JobRecord) -> bool:
        """Whether the job's kind and layer are those the query asks for (its state aside)."""
        return (self.kind is None or record.kind == self.kind) and (
            self.layer is None or record.layer == self.layer
        )


@dataclass(frozen=True)
class JobView:
    """Who looks at jobs: the principal (whose jobs it sees), whether it sees a layer (a
    coverage's polygons it may not see are hidden), and a job's links as written for it."""

    principal: Principal
    sees: Callable[[str], bool]
    links: Callable[[str], dict[str, str]]


def check_job_id(job_id: str) -> str:
    """Refuse a job id that cannot be one (job ids are UUIDs)."""
    if not _JOB_ID.match(job_id):
        raise InvalidInputError("a job id is a lowercase UUID", job_id=job_id[:64])
    return job_id


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


#: the most bytes of JSON a parameter shows in a job descriptor: a coverage's polygon or an
#: expiry list may be megabytes, which every page of jobs would carry
SHOWN_PARAM_BYTES = 2048


def _coverage_layers(value: Any) -> list[str]:
    """The layers whose polygons are coverages in a parameter's value (``Coverage.to_json``);
    a coverage's own geometry is not walked."""
    if isinstance(value, dict):
        if "geometry" in value:
            layer = value.get("layer")
            return [layer] if isinstance(layer, str) else []
        return [name for item in value.values() for name in _coverage_layers(item)]
    if isinstance(value, list):
        return [
            name
            for item in value
            if isinstance(item, dict | list)
            for name in _coverage_layers(item)
        ]
    return []


def shown_params(params: dict[str, Any], view: JobView | None) -> dict[str, Any]:
    """A job's parameters as its descriptor shows them: one of more than
    :data:`SHOWN_PARAM_BYTES` as its size (``{"omitted_bytes": n}``), one holding the polygons
    of a layer ``view`` does not see as ``{"hidden": true}``."""
    shown: dict[str, Any] = {}
    for name, value in params.items():
        if view is not None and not all(view.sees(layer) for layer in _coverage_layers(value)):
            shown[name] = {"hidden": True}
            continue
        size = len(json.dumps(value, separators=(",", ":")))
        shown[name] = value if size <= SHOWN_PARAM_BYTES else {"omitted_bytes": size}
    return shown


def _descriptor(record: JobRecord, state: str, view: JobView | None) -> dict[str, Any]:
    """The job descriptor: state, progress, times, result or error; links when ``view``
    looks."""
    return {
        "id": record.id,
        "kind": record.kind,
        "state": state,
        "layer": record.layer or None,
        "request_id": record.request_id or None,
        "progress": record.progress,
        "params": shown_params(record.params, view),
        "created": _iso(record.created),
        "started": _iso(record.started),
        "finished": _iso(record.finished),
        "worker": record.worker,
        "last_line": record.last_line,
        "cancel_requested": record.cancel_requested,
        "result": record.result,
        "error": record.error,
    } | ({"links": view.links(record.id)} if view is not None else {})


class JobService:
    """The API's side of the job pipeline (one per API process)."""

    def __init__(
        self, settings: Settings, store: JobStore, aredis: aioredis.Redis, celery: Celery
    ) -> None:
        self.settings = settings
        self.store = store
        self.aredis = aredis
        self.celery = celery
        #: connections of the waits and event streams, apart from ``aredis``
        self.stream_pool = blocking_pool(
            settings.redis_url,
            max_connections=settings.jobs.stream_redis_max_connections,
            timeout_s=settings.jobs.stream_redis_wait_s,
        )
        self.open_streams = 0
        #: the streams each caller has open (a caller with none has no entry)
        self.callers_streams: Counter[str] = Counter()

    async def aclose(self) -> None:
        """Close the connections of the stream pool."""
        await self.stream_pool.aclose()

    @asynccontextmanager
    async def event_stream(self, caller: str) -> AsyncIterator[aioredis.Redis]:
        """One SSE stream's slot of ``caller`` (a principal's id, or ``address:<ip>``) and the
        Redis client it reads through, for the block.

        Raises:
            TooManyRequestsError: ``caller`` has ``MAPSVC_SSE_STREAMS_PER_CALLER`` streams open
                in this process (``retry_after_s``): one caller never takes every slot.
            UnavailableError: ``MAPSVC_SSE_MAX_STREAMS`` streams are open in this process, or
                the stream pool has no free connection (both with ``retry_after_s``).
        """
        mine = self.settings.jobs.sse_streams_per_caller
        if self.callers_streams[caller] >= mine:
            raise TooManyRequestsError(
                f"{mine} event streams of yours are open, the most one caller may have: close"
                " one, or try again later",
                retry_after_s=_SSE_RETRY_AFTER_S,
                limit=mine,
            )
        limit = self.settings.jobs.sse_max_streams
        if self.open_streams >= limit:
            raise UnavailableError(
                f"{limit} event streams are open, the most this process serves; try again later",
                retry_after_s=_SSE_RETRY_AFTER_S,
                limit=limit,
            )
        self.open_streams += 1
        self.callers_streams[caller] += 1
        try:
            async with held_client(self.stream_pool) as client:
                yield client
        finally:
            self.open_streams -= 1
            self.callers_streams[caller] -= 1
            if not self.callers_streams[caller]:
                del self.callers_streams[caller]

    async def enqueue(
        self,
        kind: str,
        task_name: str,
        params: dict[str, Any],
        *,
        dedup: bool = False,
        job_id: str | None = None,
        owner: str = "",
        layer: str = "",
    ) -> str:
        """Record a job and send its task; with ``dedup``, join an unfinished identical job.

        Args:
            kind: what the job does, for people (``raster-config``, ``probe``…).
            task_name: the stable name of the Celery task.
            params: keyword arguments of the task (JSON).
            dedup: reuse the job already running with the same kind and parameters.
            job_id: the id of the new job, when the caller chose it (to lock on it first).
            owner: the id of the principal starting it.
            layer: the layer it is about (the one its request names), if any.

        Returns:
            The job id.
        """
        job_id = job_id or str(uuid.uuid4())
        return await run_in_threadpool(
            self._enqueue, kind, task_name, params, dedup, job_id, owner, layer
        )

    def _enqueue(
        self,
        kind: str,
        task_name: str,
        params: dict[str, Any],
        dedup: bool,
        job_id: str,
        owner: str,
        layer: str,
    ) -> str:
        if dedup:
            time_limit = self.settings.jobs.time_limit_s
            running = self.store.claim(kind, params, job_id, time_limit, owner)
            if running is not None:
                return running
        self.store.create(job_id, kind, params, owner, layer, REQUEST_ID.get() or "")
        self.celery.send_task(task_name, kwargs=params, task_id=job_id)
        return job_id

    async def describe(self, job_id: str, view: JobView | None = None) -> dict[str, Any]:
        """The job descriptor: state, progress, times, result or error, and its links when
        ``view`` looks.

        Raises:
            NotFoundError: no such job (or it expired), or one ``view``'s principal may not
                see (its creator, and operators who see its layer, may).
        """
        record, state = await run_in_threadpool(self._settled, check_job_id(job_id))
        if view is not None:
            check_may_see(view.principal, record)
        return _descriptor(record, state, view)

    async def listing(
        self, view: JobView, query: JobSelection
    ) -> tuple[list[dict[str, Any]], bool]:
        """The jobs ``view``'s principal may see that ``query`` selects, one page of them, and
        whether there is a next page.

        At most :data:`MAX_JOBS_SCANNED` of the newest (or oldest) jobs are looked at, so a
        request does bounded work.
        """
        found: list[dict[str, Any]] = []
        scanned, step = 0, 200
        want = query.offset + query.limit + 1  # one more: is there a next page?
        while len(found) < want and scanned < MAX_JOBS_SCANNED:
            batch, listed = await run_in_threadpool(
                self._select, scanned, step, view.principal, query
            )
            found += [_descriptor(record, state, view) for record, state in batch]
            scanned += step
            if listed < step:
                break
        page = found[query.offset : query.offset + query.limit]
        return page, len(found) > query.offset + query.limit

    def _select(
        self, start: int, count: int, principal: Principal, query: JobSelection
    ) -> tuple[list[tuple[JobRecord, str]], int]:
        """Of ``count`` jobs from position ``start``, those ``principal`` may see that ``query``
        selects (records and states); and how many jobs were listed."""
        ids = self.store.job_ids(start, count, newest_first=query.newest_first)
        selected = []
        for job_id in ids:
            record = self.store.get(job_id)
            # the record's own fields first: Celery is asked only about jobs still in question
            if record is None or not (may_see(principal, record) and query.matches(record)):
                continue  # expired since it was listed, another's, or not asked for
            record, state = self._state_of(record)
            if query.state is None or state == query.state:
                selected.append((record, state))
        return selected, len(ids)

    def _settled(self, job_id: str) -> tuple[JobRecord, str]:
        """The job's record and state, first writing the outcome Celery knows and the job could not.

        See :meth:`shared.jobs.JobStore.settle`.

        Returns:
            The record, and the job's state for its descriptor: its outcome once it has one,
            else what the Celery state (read once) says.
        """
        record = self.store.get(job_id)
        if record is None:
            raise NotFoundError(f"no job {job_id}", job_id=job_id)
        return self._state_of(record)

    def _state_of(self, record: JobRecord) -> tuple[JobRecord, str]:
        """The record (settled) and state of a job (see :meth:`_settled`)."""
        if record.outcome is not None:
            return record, record.outcome
        result = AsyncResult(record.id, app=self.celery)
        celery_state = result.state
        failure = None
        if celery_state == "FAILURE":
            failure = f"{type(result.result).__name__}: {result.result}"
        record = self.store.settle(
            record,
            failure=failure,
            revoked=celery_state == "REVOKED",
            stall_s=self.settings.jobs.stall_s,
        )
        return record, record.outcome or _CELERY_STATES.get(celery_state, "running")

    async def cancel(self, job_id: str, principal: Principal) -> bool:
        """Cancel a job: a queued job ends at once, a running one at its next progress line.

        Returns:
            True when the job ended now, False when it will stop at its next line.

        Raises:
            NotFoundError: no such job, or one ``principal`` may not see.
            ConflictError: the job has already finished.
        """
        return await run_in_threadpool(self._cancel, check_job_id(job_id), principal)

    def _cancel(self, job_id: str, principal: Principal) -> bool:
        record, _ = self._settled(job_id)
        check_may_see(principal, record)
        if record.outcome is not None:
            raise ConflictError(f"job {job_id} has already {record.outcome}", state=record.outcome)
        self.store.request_cancel(job_id)
        # a cancelled pre-tiling run frees its layer (and its place) at once, whatever its
        # state: its chunks still queued only count themselves cancelled (the flag is set
        # first, so that a start taking the lock after this gives it back)
        free_run(self.store, record)
        self.celery.control.revoke(job_id)
        # not started: still queued, or revoked already by the worker holding it (Celery
        # marks a task it has not started as it gets the revoke): no worker will end it
        if AsyncResult(job_id, app=self.celery).state in _NOT_STARTED:
            self.store.finish(job_id, "cancelled", FINISH_CANCELLED)
            return True
        return False

    async def wait_final(self, client: aioredis.Redis, job_id: str, timeout_s: float) -> bool:
        """Wait until the job has its final line; False when ``timeout_s`` passes first.

        Args:
            client: a client of the stream pool (it blocks on the job's stream).
            job_id: the job.
            timeout_s: longest wait.
        """
        if timeout_s <= 0:
            return False  # a block of 0 would be XREAD BLOCK 0: for ever
        deadline = time.monotonic() + timeout_s
        stream = events.job_stream(job_id)
        async for event in events.follow(client, stream, "0", block_s=min(_TICK_S, timeout_s)):
            if event is not None and event.final:
                return True
            if time.monotonic() >= deadline:
                return False
            if event is None:
                await run_in_threadpool(self._settled, job_id)
        return False  # pragma: no cover - follow never ends by itself
