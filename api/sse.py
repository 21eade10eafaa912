"""Server-Sent Events: a Redis stream of job lines relayed to an HTTP client.

Each line is sent as ``id: <stream entry id>`` and ``data: <text>``; ``Last-Event-ID`` (or
``?after=``) resumes after an entry. Comments keep an idle connection open.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import StreamingResponse

from shared import events
from shared.errors import InvalidInputError

__all__ = ["resume_point", "sse_response"]

_ENTRY_ID = re.compile(r"^\d{1,20}(-\d{1,20})?$")
_TICK_S = 1.0
_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def resume_point(request: Request, default: str) -> str:
    """Where a stream starts: after ``Last-Event-ID`` or ``?after=``, else ``default``."""
    after = request.headers.get("last-event-id") or request.query_params.get("after") or default
    if after != "$" and not _ENTRY_ID.match(after):
        raise InvalidInputError("Last-Event-ID / after must be a stream entry id", value=after[:64])
    return after


def _frame(entry_id: str, text: str) -> str:
    data = "".join(f"data: {part}\n" for part in text.split("\n"))
    return f"id: {entry_id}\n{data}\n"


def sse_response(
    request: Request,
    stream: str,
    after: str,
    *,
    keepalive_s: float,
    end_on_final: bool,
    with_job_id: bool,
    on_idle: Callable[[], Awaitable[None]] | None = None,
) -> StreamingResponse:
    """Relay ``stream`` from ``after`` as SSE.

    Args:
        request: the request (the relay stops when its client goes away).
        stream: the Redis stream key.
        after: entry id to resume after (``0``: from the start, ``$``: new lines only).
        keepalive_s: idle time after which a comment is sent.
        end_on_final: end the response after a job's final line.
        with_job_id: start each line with the job id (the stream of all jobs).
        on_idle: called on each idle second (to settle a job whose worker died).
    """

    async def body() -> AsyncIterator[str]:
        yield ": mapsvc event stream\n\n"
        idle_since = time.monotonic()
        async for event in events.follow(request.app.state.aredis, stream, after, block_s=_TICK_S):
            if event is None:
                if await request.is_disconnected():
                    return
                if time.monotonic() - idle_since >= keepalive_s:
                    idle_since = time.monotonic()
                    yield ": keep-alive\n\n"
                if on_idle is not None:
                    await on_idle()
                continue
            idle_since = time.monotonic()
            yield _frame(event.id, f"{event.job} {event.text}" if with_job_id else event.text)
            if end_on_final and event.final:
                return

    return StreamingResponse(body(), media_type="text/event-stream", headers=_HEADERS)
