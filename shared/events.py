"""Job event lines: a Redis stream per job (with a TTL), mirrored to one stream of all jobs.

A line is plain text (spec section 6). The last line of a job is marked final; a guard key makes
sure a job gets exactly one final line, whoever writes it (the task, a cancel, or the API when a
worker died without a word). Readers follow a stream from an entry id, so a subscriber that comes
late or reconnects with ``Last-Event-ID`` replays what it missed and then follows live.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis

from shared.errors import InvalidInputError

__all__ = [
    "ALL_JOBS_STREAM",
    "JobEvent",
    "follow",
    "claim_final",
    "job_stream",
    "last_entry",
    "parse_entry_id",
    "publish",
]

#: The stream of every job's lines, the spec's event stream.
ALL_JOBS_STREAM = "mapsvc:events"
_ALL_JOBS_MAXLEN = 50000
_ENTRY_ID = re.compile(r"([0-9]{1,20})(?:-([0-9]{1,20}))?")
_MAX_ID_PART = 2**64 - 1  # each part of a Redis stream entry id is an unsigned 64-bit number


@dataclass(frozen=True)
class JobEvent:
    """One line of a job's event stream, as read back."""

    id: str
    job: str
    text: str
    final: bool


def job_stream(job_id: str) -> str:
    """Redis key of the stream of one job's lines."""
    return f"mapsvc:job:{job_id}:events"


def parse_entry_id(entry_id: str) -> tuple[int, int]:
    """The two numbers of a stream entry id, ``<ms>-<seq>`` (a bare ``<ms>`` has ``seq`` 0).

    Raises:
        InvalidInputError: not an entry id, or a part beyond 2^64-1.
    """
    match = _ENTRY_ID.fullmatch(entry_id)
    parts = (int(match[1]), int(match[2] or 0)) if match else None
    if parts is None or max(parts) > _MAX_ID_PART:
        raise InvalidInputError(
            "an event id is <ms>-<seq>, two numbers up to 2^64-1", value=entry_id[:64]
        )
    return parts


async def last_entry(client: aioredis.Redis, stream: str) -> JobEvent | None:
    """The last line of a stream, or None when it has none."""
    reply: Any = await client.xrevrange(stream, count=1)
    if not reply:
        return None
    entry_id, fields = reply[0]
    return JobEvent(entry_id, fields["job"], fields["text"], fields["final"] == "1")


def _final_guard(job_id: str) -> str:
    return f"mapsvc:job:{job_id}:final"


def claim_final(client: redis.Redis, job_id: str, ttl_s: int) -> bool:
    """Take the right to write a job's final line; only the first caller gets it."""
    return bool(client.set(_final_guard(job_id), "1", nx=True, ex=ttl_s))


def publish(
    client: redis.Redis,
    job_id: str,
    text: str,
    *,
    final: bool = False,
    ttl_s: int,
    maxlen: int,
) -> str:
    """Append a line to a job's stream and to the stream of all jobs.

    Args:
        client: a synchronous Redis client that decodes responses.
        job_id: the job the line belongs to.
        text: the line, without the ``data: `` prefix.
        final: whether this is the job's last line (claim it first: :func:`claim_final`).
        ttl_s: how long the job's stream is kept after its last line.
        maxlen: most lines kept in the job's stream.

    Returns:
        The entry id of the line.
    """
    fields = {"job": job_id, "text": text, "final": "1" if final else "0"}
    key = job_stream(job_id)
    pipe = client.pipeline()
    pipe.xadd(key, fields, maxlen=maxlen, approximate=True)  # type: ignore[arg-type]
    pipe.expire(key, ttl_s)
    pipe.xadd(ALL_JOBS_STREAM, fields, maxlen=_ALL_JOBS_MAXLEN, approximate=True)  # type: ignore[arg-type]
    entry_id: str = pipe.execute()[0]
    return entry_id


async def follow(
    client: aioredis.Redis, stream: str, after: str, *, block_s: float
) -> AsyncIterator[JobEvent | None]:
    """Yield the lines of a stream after entry id ``after``, then follow it live.

    Args:
        client: an asyncio Redis client that decodes responses.
        stream: the stream key (one job's, or :data:`ALL_JOBS_STREAM`).
        after: entry id to start after: ``0`` for everything, ``$`` for new lines only.
        block_s: longest wait for a new line; ``None`` is yielded when it passes idle.

    Yields:
        Each line in order, or None after ``block_s`` without one. The caller stops iterating.
    """
    if after == "$":
        info = await client.xinfo_stream(stream) if await client.exists(stream) else None
        after = info["last-generated-id"] if info else "0"
    while True:
        reply: Any = await client.xread({stream: after}, count=100, block=int(block_s * 1000))
        if not reply:
            yield None
            continue
        for entry_id, fields in reply[0][1]:
            after = entry_id
            yield JobEvent(after, fields["job"], fields["text"], fields["final"] == "1")
