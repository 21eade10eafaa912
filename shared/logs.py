"""Logs: plain lines in a terminal, one JSON object per line anywhere else (a file, a pipe, a
log collector; ``MAPSVC_LOG_FORMAT`` chooses either), each with the request id and the job id it
concerns.

The API's request-id middleware sets :data:`REQUEST_ID` for the request's work; a job task sets
:data:`JOB_ID` (and the request id of the request that started the job) while it runs. Every
line logged meanwhile carries them, uvicorn's access lines included.

No line carries a credential: :func:`redact` masks the values of the query parameters that
hold one (``api_key=***``) and the password of a URL (``redis://:***@host``) in every line,
uvicorn's access lines and tracebacks included.
"""

from __future__ import annotations

import logging
import re
import sys
from contextvars import ContextVar
from typing import IO, Any, Literal
from urllib.parse import unquote_plus

from pythonjsonlogger.json import JsonFormatter

__all__ = ["JOB_ID", "REQUEST_ID", "SECRET_PARAMETERS", "LogFormat", "configure_logging", "redact"]

#: ``auto``: ``text`` when the lines go to a terminal, else ``json``
LogFormat = Literal["auto", "json", "text"]

#: the id of the HTTP request being served (None outside one)
REQUEST_ID: ContextVar[str | None] = ContextVar("mapsvc_request_id", default=None)
#: the id of the job being run (None outside one)
JOB_ID: ContextVar[str | None] = ContextVar("mapsvc_job_id", default=None)

#: query parameters whose values are credentials, compared in lower case: never written to a
#: log. The API's, and the providers' keys (HERE's ``apiKey``, OpenWeatherMap's ``appid``;
#: Mapbox's is ``access_token``), which the HTTP client logs with every request it makes
SECRET_PARAMETERS = frozenset(
    {"api_key", "access_token", "token", "code", "client_secret", "password", "refresh_token"}
    | {"apikey", "appid"}
)
#: ``name=value`` anywhere in a line: the value runs to the next ``&`` or blank (a value
#: that holds a ``#``, ``;`` or quote is masked whole)
_PARAMETER = re.compile(r"(?<![\w%.~+-])([\w%.~+-]+)=([^&\s]*)")
#: the password of a URL's user information: ``scheme://user:password@``
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^@\s/]*@")
_MASK = "***"

#: loggers that come with handlers of their own: their lines go through ours instead
_OWN_HANDLERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "celery")
#: loggers that say the same at every call: Alembic's "Context impl PostgresqlImpl." and "Will
#: assume transactional DDL." each time the auth tables are checked (every CLI call that needs
#: them, every API start); only their warnings and errors are kept
_QUIET = ("alembic",)


class _Ids(logging.Filter):
    """Put the request and job ids of the current context on each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        record.job_id = JOB_ID.get()
        return True


def redact(text: str) -> str:
    """``text`` with the credentials it may hold masked: the value of every parameter in
    `SECRET_PARAMETERS` (whatever its case or percent-encoding: ``api%5Fkey=***``) and the
    password of every URL."""
    if "=" not in text and "@" not in text:  # most lines (an access line without a query)
        return text
    return _URL_PASSWORD.sub(rf"\1{_MASK}@", _PARAMETER.sub(_masked, text))


def _masked(match: re.Match[str]) -> str:
    name = match.group(1)
    if unquote_plus(name).lower() in SECRET_PARAMETERS:
        return f"{name}={_MASK}"
    return match.group(0)


class _Json(JsonFormatter):
    """``{"time", "level", "logger", "message", "request_id", "job_id", …}``, no null ids;
    every text redacted."""

    def process_log_record(self, log_record: dict[str, Any]) -> dict[str, Any]:
        return {
            k: redact(v) if isinstance(v, str) else v
            for k, v in log_record.items()
            if v is not None
        }


class _Text(logging.Formatter):
    """``<time> <level> <logger> <message>`` then ``request=<id> job=<id>`` when set;
    redacted."""

    def format(self, record: logging.LogRecord) -> str:
        line = redact(super().format(record))
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
    out = stream or sys.__stderr__
    handler = logging.StreamHandler(out)
    handler.set_name(_HANDLER_NAME)
    handler.addFilter(_Ids())
    if _chosen_format(log_format, out) == "json":
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
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)


def _chosen_format(log_format: LogFormat, stream: IO[str] | None) -> LogFormat:
    """``log_format``, with ``auto`` made ``text`` for a terminal (a person reads it) and
    ``json`` for anything else (a file, a pipe, a log collector)."""
    if log_format != "auto":
        return log_format
    return "text" if stream is not None and stream.isatty() else "json"
