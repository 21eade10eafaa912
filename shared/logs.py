"""Logs: one JSON object per line (``MAPSVC_LOG_FORMAT=text``: plain lines), each with the
request id and the job id it concerns.

The API's request-id middleware sets :data:`REQUEST_ID` for the request's work; a job task sets
:data:`JOB_ID` (and the request id of the request that started the job) while it runs. Every
line logged meanwhile carries them, uvicorn's access lines included.
"""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar
from typing import IO, Any, Literal

from pythonjsonlogger.json import JsonFormatter

__all__ = ["JOB_ID", "REQUEST_ID", "LogFormat", "configure_logging"]

LogFormat = Literal["json", "text"]

#: the id of the HTTP request being served (None outside one)
REQUEST_ID: ContextVar[str | None] = ContextVar("mapsvc_request_id", default=None)
#: the id of the job being run (None outside one)
JOB_ID: ContextVar[str | None] = ContextVar("mapsvc_job_id", default=None)

#: loggers that come with handlers of their own: their lines go through ours instead
_OWN_HANDLERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "celery")


class _Ids(logging.Filter):
    """Put the request and job ids of the current context on each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        record.job_id = JOB_ID.get()
        return True


class _Json(JsonFormatter):
    """``{"time", "level", "logger", "message", "request_id", "job_id", …}``, no null ids."""

    def process_log_record(self, log_record: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in log_record.items() if v is not None}


class _Text(logging.Formatter):
    """``<time> <level> <logger> <message>`` then ``request=<id> job=<id>`` when set."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = [
            f"{name}={value}"
            for name, value in (
                ("request", record.__dict__.get("request_id")),
                ("job", record.__dict__.get("job_id")),
            )
            if value
        ]
        return f"{line} {' '.join(ids)}" if ids else line


_HANDLER_NAME = "mapsvc"


def configure_logging(
    level: str | int, log_format: LogFormat, stream: IO[str] | None = None
) -> None:
    """One handler of ours on the root logger, in ``log_format`` (a second call replaces it);
    every logger's lines go through it (uvicorn's and Celery's too).

    Lines go to ``stream``, by default the process's own standard error (``sys.__stderr__``:
    Celery replaces ``sys.stderr`` in its workers with a proxy that logs what it is given).
    """
    handler = logging.StreamHandler(stream or sys.__stderr__)
    handler.set_name(_HANDLER_NAME)
    handler.addFilter(_Ids())
    if log_format == "json":
        handler.setFormatter(
            _Json(
                "{asctime}{levelname}{name}{message}{request_id}{job_id}",
                style="{",
                rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            )
        )
    else:
        handler.setFormatter(_Text("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers = [h for h in root.handlers if h.get_name() != _HANDLER_NAME] + [handler]
    root.setLevel(level)
    for name in _OWN_HANDLERS:
        logger = logging.getLogger(name)
        logger.handlers = []
        logger.propagate = True
