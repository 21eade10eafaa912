"""The heavy-endpoint reply: what a job route's handler asks (:class:`JobStart`), started by the
endpoint's wrapper as the job its endpoint declares, and answered.

The job is enqueued and waited for up to ``MAPSVC_JOB_WAIT_S``: finished in time, the answer is
its result (or its error); otherwise ``202`` with the job descriptor, whose ``links`` point at
the job and its event stream. ``?async=1`` answers ``202`` at once. A job that holds its layer's
lock takes it before it is enqueued, and gives it back when it never was or failed in time.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.access import Sight
from api.jobs import JobService, JobView
from api.links import job_links
from api.scope import layer_of, principal_of
from api.services import services
from shared.errors import ConflictError, JobCancelledError, error_from_code
from shared.job_messages import JobMessage
from shared.queues import JobKind
from shared.redis_clients import held_client
from shared.seeding.pretile import LayerLock

__all__ = ["JobStart", "reply", "view_of"]


@dataclass(frozen=True)
class JobStart:
    """The job a handler asks for: its message, and how it starts.

    Attributes:
        message: the job's message, of the kind its endpoint declares.
        layer: the layer it is about (default: the one the route's rule read).
        job_id: its id, when the handler chose it (a file named by it, a lock taken on it).
        dedup: join an unfinished job of the same kind and parameters instead.
        lock: the layer's lock the job holds (one such job at a time per layer).
        doing: what the job does to the layer, for a refusal (``pre-tiled``, ``exported``).
        locked: the lock is taken already (a resume took it over from the run it continues).
    """

    message: JobMessage
    layer: str | None = None
    job_id: str | None = None
    dedup: bool = False
    lock: LayerLock | None = None
    doing: str = ""
    locked: bool = False


def view_of(request: Request) -> JobView:
    """The look of ``request``'s caller at jobs: its principal, the layers it sees, and the
    jobs' links as written under its mount (with its key when the request carried one)."""
    sight = Sight.of(request)
    return JobView(principal_of(request), sight.sees, lambda job_id: job_links(request, job_id))


async def reply(
    request: Request, kind: JobKind[Any], start: JobStart, *, run_async: bool
) -> Response:
    """Start ``start`` as a job of ``kind`` and answer: its result when it ends in time, else
    ``202`` with its descriptor (at once with ``run_async``).

    Raises:
        ConflictError: another job holds the layer's lock.
        MapsvcError: the job failed in time; its error, with the job id in the detail.
        UnavailableError: the stream pool has no connection to wait with; nothing was
            enqueued (503 with ``Retry-After``).
    """
    job_id = start.job_id or str(uuid.uuid4())
    lock = start.lock
    if lock is not None and not start.locked:
        running = await run_in_threadpool(lock.acquire, job_id)
        if running is not None:
            raise ConflictError(
                f"layer {lock.layer} is being {start.doing} by job {running}: wait for it to end"
                " or cancel it",
                job_id=running,
                links=job_links(request, running),
            )
    try:
        return await _started(request, services(request).jobs, kind, start, job_id, run_async)
    except Exception:
        if lock is not None:
            await run_in_threadpool(lock.release, job_id)
        raise


async def _started(
    request: Request,
    jobs: JobService,
    kind: JobKind[Any],
    start: JobStart,
    job_id: str,
    run_async: bool,
) -> Response:
    """Enqueue the job (id ``job_id``), wait for it unless ``run_async``, and answer."""
    owner, layer = principal_of(request).id, start.layer or layer_of(request) or ""

    async def enqueue() -> str:
        return await jobs.enqueue(
            kind.kind,
            kind.task,
            start.message.params(),
            dedup=start.dedup,
            job_id=job_id,
            owner=owner,
            layer=layer,
        )

    ended = False
    if run_async or jobs.settings.jobs.wait_s <= 0:
        job_id = await enqueue()
    else:
        # the connection first: when there is none, the job is refused, not left unwatched
        async with held_client(jobs.stream_pool) as client:
            job_id = await enqueue()
            ended = await jobs.wait_final(client, job_id, jobs.settings.jobs.wait_s)
    headers = {"X-Job-ID": job_id}
    view = view_of(request)
    job = await jobs.describe(job_id, view)
    if not ended:
        headers["Location"] = job["links"]["self"]
        return JSONResponse(job, status_code=202, headers=headers)
    if job["state"] == "succeeded":
        return JSONResponse(job["result"], headers=headers)
    if job["state"] == "cancelled":
        raise JobCancelledError(f"job {job_id} was cancelled", job_id=job_id)
    error = job["error"] or {"code": "internal", "message": "the job failed"}
    raise error_from_code(
        error["code"], error["message"], {**error.get("detail", {}), "job_id": job_id}
    )
