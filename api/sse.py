"""Server-Sent Events: a Redis stream of job lines relayed to an HTTP client.

Each line is sent as ``id: <stream entry id>`` and ``data: <text>``; ``Last-Event-ID`` (or
``?after=``) resumes after an entry. Comments keep an idle connection open. A stream holds one
of the process's ``MAPSVC_SSE_MAX_STREAMS`` slots and one connection of the stream pool (see
:meth:`api.jobs.JobService.event_stream`), and ends after ``MAPSVC_SSE_MAX_DURATION_S``: the
client reconnects with ``Last-Event-ID`` and loses nothing.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import anyio
import redis.asyncio as aioredis
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from api.fields import Query, stream_entry
from api.jobs import JobService
from api.openapi.answers import content
from api.openapi.models import Schema, SseEvent, ref
from api.quotas import caller_of
from shared import events
from shared.errors import InvalidInputError

__all__ = [
    "LAST_EVENT_ID",
    "SSE_ANSWER",
    "EventsQuery",
    "job_resume_point",
    "resume_point",
    "sse_response",
]

_TICK_S = 1.0
#: how often an idle job stream asks whether its job ended without a word (worker gone)
_SETTLE_S = 5.0
_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class EventsQuery(Query):
    """Where an event stream resumes (``Last-Event-ID``, a header, comes first)."""

    after: str | None = stream_entry()


def _last_event_id() -> Schema:
    """The ``Last-Event-ID`` header: what ``after`` says, and before it."""
    after: dict[str, Any] = EventsQuery.model_json_schema()["properties"]["after"]
    schema = next(s for s in after["anyOf"] if s.get("type") == "string")
    return {
        "name": "Last-Event-ID",
        "in": "header",
        "required": False,
        "description": after["description"],
        "schema": schema,
    }


#: the documented header and answer of an event stream's endpoint
LAST_EVENT_ID = _last_event_id()
SSE_ANSWER = {
    "200": content(
        "text/event-stream",
        ref(SseEvent),
        "Server-Sent Events: `id: <entry id>` and `data: <line>` per line",
    )
}


def resume_point(request: Request, after: str | None, default: str) -> str:
    """Where a stream starts: after ``Last-Event-ID`` or ``after`` (the query's), else
    ``default``.

    Raises:
        InvalidInputError: the id is not a stream entry id (or a part is beyond 2^64-1).
    """
    after = request.headers.get("last-event-id") or after or default
    if after != "$":
        events.parse_entry_id(after)
    return after


async def job_resume_point(
    request: Request, after: str | None, client: aioredis.Redis, stream: str
) -> str | None:
    """Where a job's stream starts (see :func:`resume_point`); None after its final line.

    A client that saw the final line has nothing left to read: the route answers ``204``,
    which tells an ``EventSource`` to stop reconnecting.

    Raises:
        InvalidInputError: the id is malformed, or later than the stream's last line (no
            client can have seen it).
    """
    after = resume_point(request, after, "0")
    last = await events.last_entry(client, stream)
    last_id = events.parse_entry_id(last.id if last else "0")
    seen = last_id if after == "$" else events.parse_entry_id(after)
    if seen > last_id:
        raise InvalidInputError(
            "Last-Event-ID / after is later than the last line of the job's stream",
            value=after,
            last_event_id=last.id if last else None,
        )
    return None if last is not None and last.final and seen == last_id else after


def _frame(entry_id: str, text: str) -> str:
    data = "".join(f"data: {part}\n" for part in text.split("\n"))
    return f"id: {entry_id}\n{data}\n"


class _EventStreamResponse(StreamingResponse):
    """A streaming response that gives back its slot and connection however it ends."""

    def __init__(self, content: AsyncIterator[str], close: Callable[[], Awaitable[None]]) -> None:
        super().__init__(content, media_type="text/event-stream", headers=_HEADERS)
        self._close = close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):  # a client gone mid-read cancels the task
                await self._close()


async def sse_response(
    request: Request,
    jobs: JobService,
    stream: str,
    after: str,
    *,
    end_on_final: bool,
    with_job_id: bool,
    on_idle: Callable[[], Awaitable[None]] | None = None,
) -> StreamingResponse:
    """Relay ``stream`` from ``after`` as SSE.

    Args:
        request: the request (the relay stops when its client goes away).
        jobs: the job service (stream slots, the stream pool, keep-alive and duration settings).
        stream: the Redis stream key.
        after: entry id to resume after (``0``: from the start, ``$``: new lines only).
        end_on_final: end the response after a job's final line.
        with_job_id: start each line with the job id (the stream of all jobs).
        on_idle: called every few idle seconds (to settle a job whose worker died).

    Raises:
        UnavailableError: every stream slot or every pooled connection is taken (503 with
            ``Retry-After``).
    """
    keepalive_s = jobs.settings.jobs.sse_keepalive_s
    max_duration_s = jobs.settings.jobs.sse_max_duration_s
    resources = AsyncExitStack()
    client = await resources.enter_async_context(jobs.event_stream(caller_of(request.scope)))

    async def body() -> AsyncIterator[str]:
        yield ": mapsvc event stream\n\n"
        started = idle_since = settled = time.monotonic()
        async for event in events.follow(client, stream, after, block_s=_TICK_S):
            now = time.monotonic()
            if event is None:
                if await request.is_disconnected():
                    return
                if now - idle_since >= keepalive_s:
                    idle_since = now
                    yield ": keep-alive\n\n"
                if on_idle is not None and now - settled >= _SETTLE_S:
                    settled = now
                    await on_idle()
            else:
                idle_since = now
                yield _frame(event.id, f"{event.job} {event.text}" if with_job_id else event.text)
                if end_on_final and event.final:
                    return
            if now - started >= max_duration_s:
                yield ": longest stream time reached; reconnect with Last-Event-ID\n\n"
                return

    return _EventStreamResponse(body(), resources.aclose)
