"""Liveness and readiness: ``/health`` and ``/ready``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import text
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from api.errors import error_response
from api.services import services
from shared.version import VERSION

__all__ = ["ROUTES"]

_WORKER_PING_S = 1.0


async def get_health(request: Request) -> JSONResponse:
    """The process is alive (no dependency is checked), and its version."""
    return JSONResponse({"status": "ok", "version": VERSION})


async def _check(probe: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        result = {"ok": True, **await probe()}
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready", with its reason
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
    result["ms"] = int((time.monotonic() - t0) * 1000)
    return result


async def get_ready(request: Request) -> JSONResponse:
    """Redis, PostgreSQL with PostGIS and at least one Celery worker answer; else 503."""
    state = services(request)

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
    checks = dict(zip(names, results, strict=True))
    if all(check["ok"] for check in checks.values()):
        return JSONResponse({"status": "ready", "checks": checks})
    failing = ", ".join(name for name, check in checks.items() if not check["ok"])
    return error_response(request, 503, "not-ready", f"not ready: {failing}", {"checks": checks})


ROUTES = [
    Route("/health", get_health, methods=["GET"], name="get_health"),
    Route("/ready", get_ready, methods=["GET"], name="get_ready"),
]
