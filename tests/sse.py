"""Reading Server-Sent Events in tests, frame by frame, over a real socket (as the admin)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from tests.checks import AUTH


@dataclass
class Frame:
    id: str | None
    data: str | None
    comment: str | None


def frames(response: httpx.Response) -> Iterator[Frame]:
    """Parse an SSE response into frames (a comment is a frame of its own)."""
    frame_id: str | None = None
    data: list[str] = []
    comment: str | None = None
    for line in response.iter_lines():
        if line == "":
            if data or comment is not None:
                yield Frame(frame_id, "\n".join(data) if data else None, comment)
            frame_id, data, comment = None, [], None
        elif line.startswith(":"):
            comment = line[1:].strip()
        elif line.startswith("id: "):
            frame_id = line[4:]
        elif line.startswith("data: "):
            data.append(line[6:])


def read_job_lines(
    base: str, job_id: str, *, last_event_id: str | None = None, timeout: float = 60
) -> list[Frame]:
    """All data frames of a job's event stream, until the server ends it."""
    headers = AUTH | ({"Last-Event-ID": last_event_id} if last_event_id else {})
    url = f"{base}/api-user/jobs/{job_id}/events"
    with httpx.stream("GET", url, headers=headers, timeout=timeout) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return [f for f in frames(response) if f.data is not None]
