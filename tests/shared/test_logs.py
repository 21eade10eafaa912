"""Log lines: one JSON object each (or plain text), with the request and job ids they concern."""

from __future__ import annotations

import io
import json
import logging
import os
import pty
import re
import subprocess
import sys

from shared.logs import JOB_ID, REQUEST_ID, configure_logging
from tests.conftest import ROOT


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


class _Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_auto_is_text_for_a_terminal_and_json_for_anything_else(restored: None) -> None:
    terminal, file = _Terminal(), io.StringIO()
    configure_logging("INFO", "auto", terminal)
    logging.getLogger("mapsvc.test").info("to a person")
    configure_logging("INFO", "auto", file)
    logging.getLogger("mapsvc.test").info("to a collector")
    assert terminal.getvalue().strip().endswith(" INFO mapsvc.test to a person")
    assert json.loads(file.getvalue())["message"] == "to a collector"
    # asked for, a format holds whatever the stream
    configure_logging("INFO", "json", terminal := _Terminal())
    logging.getLogger("mapsvc.test").info("forced")
    assert json.loads(terminal.getvalue())["message"] == "forced"


#: a process that logs one line to its own standard error, in the default format (auto)
_LOG_ONE_LINE = (
    "import logging; from shared.logs import configure_logging; "
    "from shared.settings import Settings; s = Settings(_env_file=None); "
    "configure_logging(s.log_level, s.log_format); logging.getLogger('mapsvc.test').info('hello')"
)


def test_a_process_logs_text_to_a_terminal_and_json_to_a_pipe() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSVC_LOG")}
    piped = subprocess.run(
        [sys.executable, "-c", _LOG_ONE_LINE],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert json.loads(piped.stderr)["message"] == "hello"
    leader, follower = pty.openpty()
    try:
        subprocess.run(
            [sys.executable, "-c", _LOG_ONE_LINE],
            stderr=follower,
            env=env,
            cwd=ROOT,
            check=True,
            timeout=60,
        )
        line = os.read(leader, 4096).decode()
    finally:
        os.close(follower)
        os.close(leader)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO mapsvc.test hello\r?\n", line)


def test_alembic_says_only_its_warnings(restored: None) -> None:
    out = io.StringIO()
    alembic = logging.getLogger("alembic.runtime.migration")
    configure_logging("INFO", "json", out)
    alembic.info("Context impl PostgresqlImpl.")
    alembic.warning("a revision went wrong")
    assert [json.loads(line)["message"] for line in out.getvalue().splitlines()] == [
        "a revision went wrong"
    ]
