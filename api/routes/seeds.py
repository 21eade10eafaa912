"""The seeds collection: pre-tiling runs with their progress; one run read, cancelled or
resumed (``/seeds/{run}``), every run of a layer cancelled (``DELETE /seeds?layer=``).

GeoWebCache's ``/rest/seed`` is the anchor: the runs going (and those ended, while their
records are kept) with done, total, remaining, rate and ETA; all the runs of a layer cancelled
at once; and, beyond it, an interrupted run continued by a new job that makes only the chunks
the old one did not.
"""

from __future__ import annotations

import functools
import time
import uuid
from dataclasses import replace
from typing import Any

from pydantic import Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from api.access import Rule, Sight
from api.endpoint import Endpoint
from api.fields import Flag, JobQuery, Query, Text, job_id
from api.job_reply import JobStart, view_of
from api.jobs import JobSelection
from api.openapi.answers import json_body
from api.openapi.models import PretileResult, Seed, SeedList, SeedsCancelled
from api.scope import principal_of
from api.services import services
from shared.errors import ConflictError, NotFoundError
from shared.jobs import JobStore
from shared.queues import PRETILE
from shared.raster.paths import MAX_ID_CHARS
from shared.seeding.coverage import Coverage
from shared.seeding.pretile import LayerLock, PretileCounters, resumable, supersede
from shared.tiles.styles import StyleInfo

__all__ = ["ENDPOINTS"]

#: the most vertices of a run's coverage as the collection draws it (simplified beyond)
OUTLINE_VERTICES = 1000
#: states of a run not ended
_UNFINISHED = ("queued", "running")


class SeedsQuery(Query):
    """Which runs to list: of a layer, unfinished only; one page."""

    layer: str | None = Text(MAX_ID_CHARS, default=None, description="Only the runs of this layer")
    going: Flag = Field(False, description="1: only the runs not ended (queued or running)")
    limit: int = Field(50, ge=1, le=200, description="Runs per page")
    offset: int = Field(0, ge=0, le=1000, description="Runs skipped")


class LayerSeedsQuery(Query):
    """The layer whose runs are cancelled."""

    layer: str = Text(MAX_ID_CHARS, description="Cancel the runs of this layer")


class RunQuery(Query):
    """A seeding run by id (its job's)."""

    run: str = job_id()


class ResumeQuery(RunQuery, JobQuery):
    """The run that goes on in a new job."""


def _progress(store: JobStore, job: dict[str, Any]) -> dict[str, Any]:
    """A run's descriptor: the job's, with its progress in tiles and its coverage."""
    counters = PretileCounters(store.client, job["id"], store.ttl_s)
    seed: dict[str, Any] = {**job, "total": None, "coverage": None}
    if not counters.exists():  # planning, or its progress expired
        return seed
    summary = counters.summary()
    seed.update(
        total=summary["plan"]["total"],
        done=summary["done"],
        remaining=summary["remaining"],
        failed=summary["failed"],
        tiles_per_s=summary["tiles_per_s"],
        eta_s=summary["eta_s"] if job["state"] == "running" else None,
        resumed_of=summary["resumed_of"],
        zooms=[
            {
                "zoom": z["zoom"],
                "tiles": z["tiles"],
                "done": z["rendered"] + z["skipped"] + z["resumed"],
                "failed": z["failed"],
            }
            for z in summary["zooms"]
        ],
    )
    coverage = counters.run().get("coverage")
    hidden = job["params"].get("coverage") == {"hidden": True}  # another layer's polygons
    if coverage is not None and not hidden:
        geometry = Coverage.from_json(coverage).outline(OUTLINE_VERTICES)
        seed["coverage"] = {"type": "Feature", "geometry": geometry, "properties": {}}
    return seed


async def _runs(
    request: Request, layer: str | None, going: bool, limit: int, offset: int
) -> list[dict[str, Any]]:
    """One page of the runs the caller may see, newest first; ``going``: of those queued or
    running (the first ``offset + limit`` of each state, merged, then the page)."""
    jobs = services(request).jobs
    if not going:
        selection = JobSelection(kind=PRETILE.kind, layer=layer, limit=limit, offset=offset)
        page, _ = await jobs.listing(view_of(request), selection)
        return page
    found = []
    for state in _UNFINISHED:
        selection = JobSelection(kind=PRETILE.kind, state=state, layer=layer, limit=offset + limit)
        found += (await jobs.listing(view_of(request), selection))[0]
    found.sort(key=lambda job: job["created"], reverse=True)
    return found[offset : offset + limit]


async def list_seeds(request: Request, query: SeedsQuery) -> JSONResponse:
    """The pre-tiling runs the caller may see, newest first, with their progress.

    Each is the job's descriptor with ``total``, ``done`` (made, found cached, or done before a
    resume), ``remaining``, ``failed``, ``tiles_per_s``, ``eta_s``, per zoom the same, and its
    ``coverage`` as a GeoJSON Feature (EPSG:4326). ``going=1`` lists the runs not ended.
    """
    runs = await _runs(request, query.layer, query.going, query.limit, query.offset)
    store = services(request).jobs.store
    seeds = [await run_in_threadpool(_progress, store, job) for job in runs]
    return JSONResponse({"seeds": seeds, "limit": query.limit, "offset": query.offset})


async def _run(request: Request, run: str) -> dict[str, Any]:
    """The job descriptor of seeding run ``run``.

    Raises:
        NotFoundError: no such job, one the caller may not see (the job store judges, as for
            ``/jobs/{id}``), or a job that is not a pre-tiling run.
    """
    job = await services(request).jobs.describe(run, view_of(request))
    if job["kind"] != PRETILE.kind:
        raise NotFoundError(f"job {run} is not a seeding run: see /jobs/{run}")
    return job


async def get_seed(request: Request, query: RunQuery) -> JSONResponse:
    """A pre-tiling run with its progress (as in the collection)."""
    job = await _run(request, query.run)
    store = services(request).jobs.store
    return JSONResponse(await run_in_threadpool(_progress, store, job))


async def delete_seed(request: Request, query: RunQuery) -> JSONResponse:
    """Cancel a run: it frees its layer at once; ``200`` when it ended now (it was queued),
    ``202`` when its chunks running finish first (those queued only count themselves
    cancelled)."""
    await _run(request, query.run)
    jobs = services(request).jobs
    ended = await jobs.cancel(query.run, principal_of(request))
    job = await jobs.describe(query.run, view_of(request))
    seed = await run_in_threadpool(_progress, jobs.store, job)
    return JSONResponse(seed, 200 if ended else 202)


async def delete_seeds(request: Request, query: LayerSeedsQuery, layer: StyleInfo) -> JSONResponse:
    """Cancel every run of a layer not ended (queued ones end now, running ones at their next
    chunk); the ids of those cancelled."""
    jobs, cancelled = services(request).jobs, []
    for job in await _runs(request, layer.style, True, 200, 0):
        await jobs.cancel(job["id"], principal_of(request))
        cancelled.append(job["id"])
    return JSONResponse({"layer": layer.style, "cancelled": cancelled})


async def post_seed_resume(request: Request, query: ResumeQuery) -> JobStart:
    """Continue an interrupted run in a new job: only the chunks it did not finish clean are
    made (a crash, killed workers, a cancellation, failed chunks).

    The run must be its layer's last. It may have ended (failed, cancelled) or still say
    ``running`` while silent for 30 s (its workers are gone): that job is then ended, naming
    the new one. The new job has the old one's parameters and plan; its result counts the tiles
    done before as ``resumed``. Resuming renders the layer again: the caller must see it still
    (a grant revoked since the run is ``404``), and it must still be configured.
    """
    job = await _run(request, query.run)
    svc = services(request)
    svc.tiles.style(Sight.of(request).check(str(job["params"].get("style", ""))))
    store, ttl = svc.jobs.store, svc.settings.jobs.time_limit_s
    old = await run_in_threadpool(resumable, store, query.run, ttl, time.time())
    message = replace(PRETILE.read(old.params), resume_of=old.id)
    style = message.style
    job_id = str(uuid.uuid4())
    lock = LayerLock(store, style, ttl)
    # the old run's lock first, in one step: a resume that loses a race ends nothing
    running = await run_in_threadpool(lock.take_over, old.id, job_id)
    if running is not None:
        raise ConflictError(f"layer {style} is being pre-tiled by job {running}", job_id=running)
    await run_in_threadpool(supersede, store, old, job_id)
    return JobStart(message, layer=style, job_id=job_id, lock=lock, locked=True)


#: the layer's runs (the rule judges the layer named), or one run (the job store judges who may
#: see it, as for /jobs/{id})
_LAYER, _RUN = Rule("operator", layers=("layer",)), Rule("operator")
#: reading runs spends the data budget, changing them the jobs budget
_read = functools.partial(Endpoint, "GET", budget="data", tag="tiles")
_change = functools.partial(Endpoint, budget="jobs", tag="tiles")

ENDPOINTS = [
    _read(
        "/seeds",
        list_seeds,
        rule=_LAYER,
        query=SeedsQuery,
        answer={"200": json_body(SeedList, "The runs, newest first, with their progress")},
    ),
    _change(
        "DELETE",
        "/seeds",
        delete_seeds,
        rule=_LAYER,
        query=LayerSeedsQuery,
        answer={"200": json_body(SeedsCancelled, "The ids of the runs cancelled")},
        errors=(404,),
        resolves="raster",
    ),
    _read(
        "/seeds/{run}",
        get_seed,
        rule=_RUN,
        query=RunQuery,
        answer={"200": json_body(Seed, "The run with its progress")},
        errors=(404,),
    ),
    _change(
        "DELETE",
        "/seeds/{run}",
        delete_seed,
        rule=_RUN,
        query=RunQuery,
        answer={
            "200": json_body(Seed, "The run, ended now (it was queued)"),
            "202": json_body(Seed, "The run, stopping: its layer is free already"),
        },
        errors=(404, 409),
    ),
    _change(
        "POST",
        "/seeds/{run}/resume",
        post_seed_resume,
        rule=_RUN,
        query=ResumeQuery,
        answer={"200": json_body(PretileResult, "The resumed run's result")},
        errors=(404, 409, 422),
        job=PRETILE,
    ),
]
