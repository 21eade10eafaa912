"""Log lines: one JSON object each (or plain text), with the request and job ids they concern."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from shared.logs import JOB_ID, REQUEST_ID, configure_logging


@pytest.fixture
def restored() -> Iterator[None]:
    """The root logger as it was (the handlers configure_logging replaces)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers, root.level = handlers, level


def test_json_lines_carry_the_ids_of_their_context(restored: None) -> None:
    out = io.StringIO()
    configure_logging("INFO", "json", out)
    access = logging.getLogger("uvicorn.access")
    level = access.level
    access.setLevel(logging.INFO)  # a live server of another test may have set it
    log = logging.getLogger("mapsvc.test")
    log.info("outside")
    token = REQUEST_ID.set("req-1")
    try:
        log.warning("in a request: %s", "tile")
        job = JOB_ID.set("job-9")
        log.info("in its job")
        JOB_ID.reset(job)
    finally:
        REQUEST_ID.reset(token)
    access.info("GET / 200")  # its own handlers are ours now
    access.setLevel(level)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["message"] for line in lines] == [
        "outside",
        "in a request: tile",
        "in its job",
        "GET / 200",
    ]
    assert not {"request_id", "job_id"} & set(lines[0])
    assert (lines[1]["request_id"], lines[1]["level"], lines[1]["logger"]) == (
        "req-1",
        "WARNING",
        "mapsvc.test",
    )
    assert (lines[2]["request_id"], lines[2]["job_id"]) == ("req-1", "job-9")
    assert {"time", "level", "logger", "message"} <= set(lines[3])


def test_text_lines_when_asked(restored: None) -> None:
    out = io.StringIO()
    configure_logging("INFO", "text", out)
    token = JOB_ID.set("job-9")
    logging.getLogger("mapsvc.test").info("plain")
    JOB_ID.reset(token)
    line = out.getvalue().strip()
    assert line.endswith(" INFO mapsvc.test plain job=job-9")
