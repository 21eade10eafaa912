"""The seeds collection: pre-tiling runs with their progress, cancelled by layer, resumed.

GeoWebCache's ``/rest/seed`` is the anchor: the runs going (and those ended, while their
records are kept) with done, total, remaining, rate and ETA; all the runs of a layer cancelled
at once; and, beyond it, an interrupted run continued by a new job that makes only the chunks
the old one did not.
"""

from __future__ import annotations

import functools
import time
import uuid
from typing import Any

from pydantic import Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.access import Rule, principal_of
from api.endpoint import Endpoint, Job
from api.fields import Flag, JobQuery, Query, Text, style_id
from api.jobs import JobQuery as Selection
from api.openapi.answers import json_body
from api.openapi.models import PretileResult, SeedList, SeedsCancelled
from api.services import services
from shared.errors import ConflictError
from shared.jobs import JobStore
from shared.raster.paths import MAX_ID_CHARS
from shared.tiles.coverage import Coverage
from shared.tiles.pretile import LayerLock, PretileCounters, resumable, supersede

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
    """A layer whose runs are named."""

    id: str = style_id()


class ResumeQuery(JobQuery):
    """The layer whose last run goes on."""

    id: str = style_id()


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
        selection = Selection(kind="pretile", layer=layer, limit=limit, offset=offset)
        found: list[dict[str, Any]] = (await jobs.listing(request, selection))["jobs"]
        return found
    found = []
    for state in _UNFINISHED:
        selection = Selection(kind="pretile", state=state, layer=layer, limit=offset + limit)
        found += (await jobs.listing(request, selection))["jobs"]
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


async def delete_layer_seeds(request: Request, query: LayerSeedsQuery) -> JSONResponse:
    """Cancel every run of a layer not ended (queued ones end now, running ones at their next
    chunk); the ids of those cancelled."""
    svc = services(request)
    svc.tiles.style(query.id)  # 404 for a layer that is not one
    cancelled = []
    for job in await _runs(request, query.id, True, 200, 0):
        await svc.jobs.cancel(job["id"], principal_of(request))
        cancelled.append(job["id"])
    return JSONResponse({"layer": query.id, "cancelled": cancelled})


async def post_layer_pretile_resume(request: Request, query: ResumeQuery) -> Response:
    """Continue the layer's interrupted run in a new job: only the chunks it did not finish
    clean are made (a crash, killed workers, a cancellation, failed chunks).

    The run may have ended (failed, cancelled) or still say ``running`` while silent for 30 s
    (its workers are gone): that job is then ended, naming the new one. The new job has the
    old one's parameters and plan; its result counts the tiles done before as ``resumed``.
    """
    svc = services(request)
    style = query.id
    svc.tiles.style(style)
    store, ttl = svc.jobs.store, svc.settings.jobs.time_limit_s
    old = await run_in_threadpool(resumable, store, style, ttl, time.time())
    job_id = str(uuid.uuid4())
    lock = LayerLock(store, style, ttl)
    # the old run's lock first, in one step: a resume that loses a race ends nothing
    running = await run_in_threadpool(lock.take_over, old.id, job_id)
    if running is not None:
        raise ConflictError(f"layer {style} is being pre-tiled by job {running}", job_id=running)
    await run_in_threadpool(supersede, store, old, job_id)
    params = {**old.params, "resume_of": old.id}
    try:
        return await svc.jobs.reply(request, params, run_async=query.run_async, job_id=job_id)
    except Exception:
        await run_in_threadpool(lock.release, job_id)
        raise


_get = functools.partial(Endpoint, "GET", tag="tiles")
#: who pre-tiles the layer (and its coverage's) manages its runs
_PRETILE = Rule("operator", layers=("id",))

ENDPOINTS = [
    _get(
        "/seeds",
        list_seeds,
        rule=Rule("operator", layers=("layer",)),
        budget="data",
        query=SeedsQuery,
        answer={"200": json_body(SeedList, "The runs, newest first, with their progress")},
    ),
    Endpoint(
        "DELETE",
        "/seeds/{id}",
        delete_layer_seeds,
        rule=_PRETILE,
        budget="jobs",
        query=LayerSeedsQuery,
        answer={"200": json_body(SeedsCancelled, "The ids of the runs cancelled")},
        errors=(404,),
        tag="tiles",
    ),
    Endpoint(
        "POST",
        "/gis-layer-pretile/{id}/resume",
        post_layer_pretile_resume,
        rule=_PRETILE,
        budget="jobs",
        query=ResumeQuery,
        answer={"200": json_body(PretileResult, "The resumed run's result")},
        errors=(404, 409, 422),
        job=Job("pretile", "tiles.pretile"),
        tag="tiles",
    ),
]
