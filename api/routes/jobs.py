"""Jobs and their event streams, plus the pipeline probe job."""

from __future__ import annotations

import functools
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, WithJsonSchema
from pydantic_core import PydanticCustomError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.access import Rule
from api.endpoint import Endpoint
from api.fields import JobQuery, Query, Text, job_id
from api.job_reply import JobStart, view_of
from api.jobs import JOB_STATES, MAX_JOBS_SCANNED, JobSelection
from api.links import link
from api.openapi.answers import json_body
from api.openapi.models import Job as JobDescriptor
from api.openapi.models import JobList, ProbeResult
from api.scope import principal_of
from api.services import services
from api.sse import (
    LAST_EVENT_ID,
    SSE_ANSWER,
    EventsQuery,
    job_resume_point,
    resume_point,
    sse_response,
)
from shared import events
from shared import job_messages as messages
from shared.diag import MAX_PROBE_DELAY_MS, MAX_PROBE_STEPS, check_probe_params
from shared.errors import NotFoundError
from shared.queues import PROBE
from shared.raster.paths import MAX_ID_CHARS

__all__ = ["ENDPOINTS"]


def _job_state(value: str) -> str:
    if value not in JOB_STATES:
        raise PydanticCustomError(
            "enum", "must be one of {expected}", {"expected": ", ".join(JOB_STATES)}
        )
    return value


#: a job's state, one of :data:`~api.jobs.JOB_STATES`
_State = Annotated[
    str,
    AfterValidator(_job_state),
    WithJsonSchema({"type": "string", "enum": list(JOB_STATES)}),
]


class ListQuery(Query):
    """Which jobs to list, in which order, which page."""

    kind: str | None = Text(
        64, default=None, description="Only jobs of this kind (pretile, raster-config, …)"
    )
    state: _State | None = Field(None, description="Only jobs in this state")
    layer: str | None = Text(MAX_ID_CHARS, default=None, description="Only jobs about this layer")
    order: Literal["-created", "created"] = Field(
        "-created",
        alias="ord",
        description="Order: `-created` (newest first, the default) or `created`",
    )
    limit: int = Field(50, ge=1, le=200, description="Jobs per page")
    offset: int = Field(0, ge=0, le=MAX_JOBS_SCANNED, description="Jobs skipped")


class JobIdQuery(Query):
    """A job named by the path."""

    job_id: str = job_id()


class JobEventsQuery(EventsQuery):
    """A job's event stream, and where it resumes."""

    job_id: str = job_id()


class ProbeQuery(JobQuery):
    """The probe's lines, their pace, and the step it fails at."""

    steps: int = Field(3, ge=1, le=MAX_PROBE_STEPS, description="Lines to write")
    delay_ms: int = Field(100, ge=0, le=MAX_PROBE_DELAY_MS, description="Pause between lines")
    fail_at: int = Field(0, ge=0, le=MAX_PROBE_STEPS, description="Fail at this step (0: never)")


async def list_jobs(request: Request, query: ListQuery) -> JSONResponse:
    """The jobs collection: newest first, one page; operators see every job.

    ``kind``, ``state``, ``layer`` select; ``ord`` is ``-created`` (default) or ``created``;
    ``limit`` and ``offset`` page (spec 4.0 rule 3). Callers see their own jobs; operators
    those of the layers they see too (every job, when not limited to layers).
    """
    selection = JobSelection(
        kind=query.kind,
        state=query.state,
        layer=query.layer,
        newest_first=query.order == "-created",
        limit=query.limit,
        offset=query.offset,
    )
    page, more = await services(request).jobs.listing(view_of(request), selection)
    params = [(k, v) for k, v in request.query_params.multi_items() if k != "offset"]
    following = [*params, ("offset", str(query.offset + query.limit))]
    return JSONResponse(
        {
            "jobs": page,
            "limit": query.limit,
            "offset": query.offset,
            "next": link(request, request.url.path, following) if more else None,
        }
    )


async def get_job(request: Request, query: JobIdQuery) -> JSONResponse:
    """A job's state, progress, result or error."""
    return JSONResponse(await services(request).jobs.describe(query.job_id, view_of(request)))


async def delete_job(request: Request, query: JobIdQuery) -> JSONResponse:
    """Cancel a job.

    ``200`` when it ended now (it was queued), ``202`` when it stops at its next progress line.
    """
    jobs = services(request).jobs
    ended = await jobs.cancel(query.job_id, principal_of(request))
    return JSONResponse(await jobs.describe(query.job_id, view_of(request)), 200 if ended else 202)


async def get_job_events(request: Request, query: JobEventsQuery) -> Response:
    """The job's lines as SSE, from the start (or after Last-Event-ID) to its final line.

    ``204`` when the client has already seen the final line (an ``EventSource`` stops there).
    """
    jobs = services(request).jobs
    job_id = query.job_id
    await jobs.describe(job_id, view_of(request))  # 404 for an unknown job, or another's
    stream = events.job_stream(job_id)
    after = await job_resume_point(request, query.after, jobs.aredis, stream)
    if after is None:
        return Response(status_code=204)

    async def settle() -> None:
        await jobs.describe(job_id)

    return await sse_response(
        request,
        jobs,
        stream,
        after,
        end_on_final=True,
        with_job_id=False,
        on_idle=settle,
    )


async def get_events(request: Request, query: EventsQuery) -> Response:
    """Every job's lines as SSE, each starting with its job id.

    New lines only, unless resumed. Only for operators not limited to layers (the rule says
    so): the lines are every layer's.
    """
    return await sse_response(
        request,
        services(request).jobs,
        events.ALL_JOBS_STREAM,
        resume_point(request, query.after, "$"),
        end_on_final=False,
        with_job_id=True,
    )


async def post_probe(request: Request, query: ProbeQuery) -> JobStart:
    """The pipeline probe: a job that only reports.

    The heavy-endpoint reply: its result, or ``202`` with the job. Off unless
    ``MAPSVC_DIAG_PROBE`` is set: then the route answers as if it did not exist.
    """
    svc = services(request)
    if not svc.jobs.settings.diag_probe:
        raise NotFoundError(f"no route {request.method} {request.url.path}")
    check_probe_params(query.steps, query.delay_ms, query.fail_at)  # fail_at <= steps
    return JobStart(messages.Probe(query.steps, query.delay_ms, query.fail_at))


#: an endpoint of the jobs' group: watching and stopping jobs spends the data budget
_endpoint = functools.partial(Endpoint, budget="data", tag="jobs")
#: a reader's look at, or hand on, one job (the job store says whose it is)
_one_job = functools.partial(_endpoint, rule=Rule("reader"))
#: a GET of the jobs' group
_get = functools.partial(_endpoint, "GET")

ENDPOINTS = [
    _get(
        "/jobs",
        list_jobs,
        rule=Rule("reader", layers=("layer",)),
        query=ListQuery,
        answer={"200": json_body(JobList, "One page of jobs; `next`: the next page's URL")},
    ),
    _one_job(
        "GET",
        "/jobs/{job_id}",
        get_job,
        query=JobIdQuery,
        answer={"200": json_body(JobDescriptor, "The job descriptor")},
        errors=(404,),
    ),
    _one_job(
        "DELETE",
        "/jobs/{job_id}",
        delete_job,
        query=JobIdQuery,
        answer={
            "200": json_body(JobDescriptor, "The job ended now (it was queued)"),
            "202": json_body(JobDescriptor, "The job stops at its next progress line"),
        },
        errors=(404, 409),
    ),
    _one_job(
        "GET",
        "/jobs/{job_id}/events",
        get_job_events,
        query=JobEventsQuery,
        headers=(LAST_EVENT_ID,),
        answer=SSE_ANSWER,
        errors=(404,),
    ),
    _get(
        "/events",
        get_events,
        rule=Rule("operator", every_layer=True),
        query=EventsQuery,
        headers=(LAST_EVENT_ID,),
        answer=SSE_ANSWER,
    ),
    _endpoint(
        "POST",
        "/diag/probe",
        post_probe,
        rule=Rule("operator"),
        budget="jobs",  # it starts jobs like any other
        query=ProbeQuery,
        answer={"200": json_body(ProbeResult, "The probe's result")},
        job=PROBE,
    ),
]
