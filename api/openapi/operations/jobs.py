"""The operations of the job routes (``api.routes.jobs``)."""

from __future__ import annotations

from api.jobs import JOB_STATES, MAX_JOBS_SCANNED
from api.openapi.models import Job, JobList, ProbeResult, SseEvent, ref
from api.openapi.operation import Operation, content, heavy, json_body
from api.openapi.parameters import AFTER, JOB_ID, LAST_EVENT_ID, integer, param, text
from shared.diag import MAX_PROBE_DELAY_MS, MAX_PROBE_STEPS
from shared.raster.paths import MAX_ID_CHARS

__all__ = ["operations"]

_SSE = content(
    "text/event-stream",
    ref(SseEvent),
    "Server-Sent Events: `id: <entry id>` and `data: <line>` per line",
)


def operations() -> dict[str, Operation]:
    """The operations of the job routes by name."""
    return {
        "list_jobs": Operation(
            "The jobs collection: newest first, one page; operators see every job",
            "jobs",
            [
                text("query", "kind", "Only jobs of this kind (pretile, raster-config, …)"),
                param(
                    "query",
                    "state",
                    {"type": "string", "enum": list(JOB_STATES)},
                    "Only jobs in this state",
                ),
                text("query", "layer", "Only jobs about this layer", max_length=MAX_ID_CHARS),
                param(
                    "query",
                    "ord",
                    {"type": "string", "enum": ["-created", "created"]},
                    "Order: `-created` (newest first, the default) or `created`",
                ),
                integer("query", "limit", 1, 200, "Jobs per page (default 50)"),
                integer("query", "offset", 0, MAX_JOBS_SCANNED, "Jobs skipped (default 0)"),
            ],
            {"200": json_body(JobList, "One page of jobs; `next`: the next page's URL")},
        ),
        "get_job": Operation(
            "A job's state, progress, result or error",
            "jobs",
            [JOB_ID],
            {"200": json_body(Job, "The job descriptor")},
            [404],
        ),
        "delete_job": Operation(
            "Cancel a job",
            "jobs",
            [JOB_ID],
            {
                "200": json_body(Job, "The job ended now (it was queued)"),
                "202": json_body(Job, "The job stops at its next progress line"),
            },
            [404, 409],
        ),
        "get_job_events": Operation(
            "The job's lines as SSE, from the start (or after Last-Event-ID) to its final line",
            "jobs",
            [JOB_ID, LAST_EVENT_ID, AFTER],
            {"200": _SSE},
            [404],
        ),
        "get_events": Operation(
            "Every job's lines as SSE, each starting with its job id",
            "jobs",
            [LAST_EVENT_ID, AFTER],
            {"200": _SSE},
        ),
        "get_probe": heavy(
            "The pipeline probe: a job that only reports",
            "jobs",
            [
                integer("query", "steps", 1, MAX_PROBE_STEPS, "Lines to write (default 3)"),
                integer("query", "delay_ms", 0, MAX_PROBE_DELAY_MS, "Pause between lines"),
                integer("query", "fail_at", 0, MAX_PROBE_STEPS, "Fail at this step (0: never)"),
            ],
            json_body(ProbeResult, "The probe's result"),
        ),
    }
