"""Liveness and readiness: ``/health`` and ``/ready`` (its detail for operators only)."""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import text
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from api.access import Rule
from api.endpoint import Endpoint
from api.errors import error_response
from api.openapi.answers import json_body
from api.openapi.models import Health, Ready
from api.scope import principal_of
from api.services import Services, services
from shared.singleflight import SingleFlight
from shared.version import VERSION

__all__ = ["ENDPOINTS"]

_WORKER_PING_S = 1.0
#: how long a check answers anonymous callers (a check itself takes up to ``_WORKER_PING_S``)
_FRESH_S = 1.0


async def get_health(request: Request) -> JSONResponse:
    """The process is alive.

    No dependency is checked; the answer names the version.
    """
    return JSONResponse({"status": "ok", "version": VERSION})


async def _check(probe: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        result = {"ok": True, **await probe()}
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready", with its reason
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
    result["ms"] = int((time.monotonic() - t0) * 1000)
    return result


async def _checks(state: Services) -> dict[str, dict[str, Any]]:
    """Check Redis, PostgreSQL with PostGIS and the Celery workers, all at once."""

    async def redis_probe() -> dict[str, Any]:
        await state.aredis.ping()
        return {}

    async def database_probe() -> dict[str, Any]:
        async with state.ready_db.connect() as conn:
            postgis = await conn.scalar(text("SELECT postgis_lib_version()"))
        return {"postgis": postgis}

    async def workers_probe() -> dict[str, Any]:
        replies = await run_in_threadpool(state.celery.control.ping, timeout=_WORKER_PING_S)
        names = sorted(name for reply in replies for name in reply)
        if not names:
            raise RuntimeError("no Celery worker answered")
        return {"count": len(names), "names": names}

    names = ("redis", "database", "workers")
    results = await asyncio.gather(
        *(_check(p) for p in (redis_probe, database_probe, workers_probe))
    )
    return dict(zip(names, results, strict=True))


class _LastCheck:
    """The last readiness check of an API process, which anonymous callers are answered from.

    A check is run at most once at a time, whoever asks meanwhile sharing it (a single
    flight): an operator gets the check running, or one run for them (never a finished one),
    anyone else the last result while less than ``_FRESH_S`` has passed since it ended (so it
    is at most ``_FRESH_S`` plus a check's time old: 1–2 s). A flood of anonymous calls costs
    at most one check (one thread held for the Celery ping) every ``_FRESH_S``.
    """

    def __init__(self) -> None:
        self._flight = SingleFlight[dict[str, dict[str, Any]]]()
        self._result: dict[str, dict[str, Any]] | None = None
        self._at = -math.inf

    async def fresh(self, state: Services) -> dict[str, dict[str, Any]]:
        """The check running, or one run now: never a finished one."""
        return await self._flight.run("ready", lambda: self._run(state))

    async def recent(self, state: Services) -> dict[str, dict[str, Any]]:
        """The last check if younger than ``_FRESH_S``, else a fresh one."""
        if self._result is not None and time.monotonic() - self._at < _FRESH_S:
            return self._result
        return await self.fresh(state)

    async def _run(self, state: Services) -> dict[str, dict[str, Any]]:
        result = await _checks(state)
        self._result, self._at = result, time.monotonic()
        return result


def _last_check(request: Request) -> _LastCheck:
    """The last check of the app answering ``request`` (made with its first ``/ready``)."""
    app_state = request.app.state
    if not hasattr(app_state, "last_ready_check"):
        app_state.last_ready_check = _LastCheck()
    last: _LastCheck = app_state.last_ready_check
    return last


async def get_ready(request: Request) -> JSONResponse:
    """Redis, PostgreSQL with PostGIS and a Celery worker answer.

    Else ``503``. Operators (and admins) get a check run for them, with each dependency's
    detail (versions, workers, errors); anyone else the process's last check (1–2 s old at
    most), as ready or not ready only.
    """
    state, last = services(request), _last_check(request)
    operator = principal_of(request).has("operator")
    checks = await (last.fresh(state) if operator else last.recent(state))
    ready = all(check["ok"] for check in checks.values())
    if not operator:
        if ready:
            return JSONResponse({"status": "ready"})
        return error_response(request, 503, "not-ready", "not ready")
    if ready:
        return JSONResponse({"status": "ready", "checks": checks})
    failing = ", ".join(name for name, check in checks.items() if not check["ok"])
    return error_response(request, 503, "not-ready", f"not ready: {failing}", {"checks": checks})


#: an endpoint of the system: anyone's GET, on the documents budget
_endpoint = functools.partial(Endpoint, "GET", rule=Rule(None), budget="documents", tag="system")

ENDPOINTS = [
    _endpoint("/health", get_health, answer={"200": json_body(Health, "Alive")}),
    _endpoint("/ready", get_ready, answer={"200": json_body(Ready, "Ready")}),
]
