"""Jobs and their event streams, plus the pipeline probe job."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from api.access import principal_of
from api.jobs import JOB_STATES, MAX_JOBS_SCANNED, JobQuery, check_job_id
from api.params import int_param, text_param
from api.services import services
from api.sse import job_resume_point, resume_point, sse_response
from shared import events
from shared.diag import MAX_PROBE_STEPS, check_probe_params
from shared.errors import InvalidInputError, NotFoundError
from shared.raster.paths import MAX_ID_CHARS

__all__ = ["ROUTES"]


async def list_jobs(request: Request) -> JSONResponse:
    """The jobs collection (spec 4.0 rule 3): newest first, one page, filtered by query.

    ``kind``, ``state``, ``layer`` select; ``ord`` is ``-created`` (default) or ``created``;
    ``limit`` (1–200, 50) and ``offset`` page. Callers see their own jobs; operators those of
    the layers they see too (every job, when not limited to layers).
    """
    q = request.query_params
    state = q.get("state") or None
    if state is not None and state not in JOB_STATES:
        raise InvalidInputError(
            f"state is one of {', '.join(JOB_STATES)}", parameter="state", value=state[:64]
        )
    order = q.get("ord") or "-created"
    if order not in ("created", "-created"):
        raise InvalidInputError(
            "ord is created or -created (newest first)", parameter="ord", value=order[:64]
        )
    query = JobQuery(
        kind=text_param(request, "kind", 64),
        state=state,
        layer=text_param(request, "layer", MAX_ID_CHARS),
        newest_first=order == "-created",
        limit=int_param(request, "limit", 50, 1, 200),
        offset=int_param(request, "offset", 0, 0, MAX_JOBS_SCANNED),
    )
    return JSONResponse(await services(request).jobs.listing(request, query))


async def get_job(request: Request) -> JSONResponse:
    """State, progress, result or error of one job."""
    job = await services(request).jobs.describe(request.path_params["job_id"], request)
    return JSONResponse(job)


async def delete_job(request: Request) -> JSONResponse:
    """Cancel a job: 200 when it ended now, 202 when it stops at its next progress line."""
    jobs = services(request).jobs
    job_id = request.path_params["job_id"]
    ended = await jobs.cancel(job_id, principal_of(request))
    return JSONResponse(await jobs.describe(job_id, request), 200 if ended else 202)


async def get_job_events(request: Request) -> Response:
    """The job's lines as SSE, from the start (or ``Last-Event-ID``) to its final line.

    ``204`` when the client has already seen the final line (an ``EventSource`` stops there).
    """
    jobs = services(request).jobs
    job_id = check_job_id(request.path_params["job_id"])
    await jobs.describe(job_id, request)  # 404 for an unknown job, or another's
    stream = events.job_stream(job_id)
    after = await job_resume_point(request, jobs.aredis, stream)
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


async def get_events(request: Request) -> Response:
    """Every job's lines as SSE, each starting with its job id; new lines unless resumed.

    Only for operators not limited to layers (the rule says so): the lines are every layer's.
    """
    return await sse_response(
        request,
        services(request).jobs,
        events.ALL_JOBS_STREAM,
        resume_point(request, "$"),
        end_on_final=False,
        with_job_id=True,
    )


async def get_probe(request: Request) -> Response:
    """Run the pipeline probe job (heavy-endpoint reply: result, or 202 with the job).

    Off unless ``MAPSVC_DIAG_PROBE`` is set: then the route answers as if it did not exist.
    """
    svc = services(request)
    if not svc.jobs.settings.diag_probe:
        raise NotFoundError(f"no route {request.method} {request.url.path}")
    steps = int_param(request, "steps", 3, 1, MAX_PROBE_STEPS)
    delay_ms = int_param(request, "delay_ms", 100, 0, 10000)
    fail_at = int_param(request, "fail_at", 0, 0, MAX_PROBE_STEPS)
    check_probe_params(steps, delay_ms, fail_at)
    params = {"steps": steps, "delay_ms": delay_ms, "fail_at": fail_at}
    return await svc.jobs.reply(request, "probe", "diag.probe", params)


ROUTES = [
    Route("/jobs", list_jobs, methods=["GET"], name="list_jobs"),
    Route("/jobs/{job_id}", get_job, methods=["GET"], name="get_job"),
    Route("/jobs/{job_id}", delete_job, methods=["DELETE"], name="delete_job"),
    Route("/jobs/{job_id}/events", get_job_events, methods=["GET"], name="get_job_events"),
    Route("/events", get_events, methods=["GET"], name="get_events"),
    Route("/diag/probe", get_probe, methods=["GET"], name="get_probe"),
]
