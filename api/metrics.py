"""Prometheus metrics over HTTP: every request counted and timed, ``GET /metrics`` for operators.

Requests are labelled by route template (``/api-user/rtile/{style}/{z}/{x}/{y}.png``, never the
path asked for; ``unmatched`` when no route has it), method and status class (``2xx``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from prometheus_client.exposition import choose_encoder
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.types import Message, Receive, Scope, Send

from api.access import Rule
from api.endpoint import Endpoint
from api.middleware import HttpMiddleware
from api.services import services
from shared import metrics

__all__ = ["ENDPOINTS", "UNMATCHED", "MetricsMiddleware", "get_metrics", "route_template"]

#: the route label of a request no route answers
UNMATCHED = "unmatched"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _match(routes: Sequence[BaseRoute], scope: Scope, prefix: str) -> str | None:
    for route in routes:
        match, child = route.matches(scope)
        if match is Match.NONE:
            continue
        if isinstance(route, Mount):
            return _match(route.routes, {**scope, **child}, prefix + route.path)
        if isinstance(route, Route):
            return prefix + route.path
    return None


def route_template(scope: Scope, root_path: str) -> str:
    """The template of the route that answered (or would have answered) a request.

    Args:
        scope: the request's scope, after the app answered it.
        root_path: the scope's ``root_path`` before routing (the server's).
    """
    route = scope.get("route")
    if isinstance(route, Route):  # the router leaves the route it chose, its mount's path in
        return str(scope.get("root_path", ""))[len(root_path) :] + route.path
    if "router" in scope:  # the router ran and found no route
        return UNMATCHED
    # refused before routing (credentials, quota, host): ask the routes
    method, path = scope["method"], scope["path"]
    asked = {"type": "http", "method": method, "path": path, "root_path": root_path}
    return _match(scope["app"].router.routes, asked, "") or UNMATCHED


class MetricsMiddleware(HttpMiddleware):
    """Count and time every request by route template, method and status class."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: D102
        start = time.perf_counter()
        root_path = str(scope.get("root_path", ""))
        status = 500  # no answer started: the server answers 500
        counted = False

        def count() -> None:
            nonlocal counted
            counted = True
            method = scope["method"] if scope["method"] in _METHODS else "other"
            labels = (route_template(scope, root_path), method, f"{status // 100}xx")
            metrics.HTTP_REQUESTS.labels(*labels).inc()
            metrics.HTTP_SECONDS.labels(*labels).observe(time.perf_counter() - start)

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                count()  # before the last bytes go out: whoever has the answer finds it counted
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        finally:
            if not counted:
                count()


async def get_metrics(request: Request) -> Response:
    """Every API and worker process's metrics (also at the root: ``GET /metrics``).

    In Prometheus' text format, or OpenMetrics when ``Accept`` asks; for operators not limited
    to some layers (the series name every layer).
    """
    svc = services(request)
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    found = metrics.registry(metrics.metrics_root(svc.settings), svc.redis)
    body = await run_in_threadpool(encode, found)  # files and Redis: off the event loop
    return Response(body, headers={"Content-Type": content_type, "Cache-Control": "no-store"})


_TEXT = {"schema": {"type": "string"}}

#: ``/metrics``, at the root (where Prometheus looks) and under each mount
ENDPOINTS = [
    Endpoint(
        "GET",
        "/metrics",
        get_metrics,
        rule=Rule("operator", every_layer=True),  # every layer's counts: 403 to a limited one
        budget="admin",
        answer={
            "200": {
                "description": "Prometheus' text format, or OpenMetrics when `Accept` asks",
                "content": {"text/plain": _TEXT, "application/openmetrics-text": _TEXT},
            }
        },
        tag="system",
        place="mounts+root",
    )
]
