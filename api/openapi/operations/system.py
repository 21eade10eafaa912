"""The operations of the system routes (``api.routes.system``, the document itself and
``/metrics`` of ``api.metrics``)."""

from __future__ import annotations

from api.openapi.models import Health, Ready
from api.openapi.operation import Operation, content, json_body

__all__ = ["operations"]

_TEXT = {"type": "string"}


def operations() -> dict[str, Operation]:
    """The operations of the health, readiness and OpenAPI routes by name."""
    return {
        "get_health": Operation(
            "The process is alive", "system", responses={"200": json_body(Health, "Alive")}
        ),
        "get_ready": Operation(
            "Redis, PostgreSQL with PostGIS and a Celery worker answer",
            "system",
            responses={"200": json_body(Ready, "Ready")},
        ),
        "get_openapi": Operation(
            "This document",
            "system",
            responses={"200": content("application/json", {"type": "object"}, "OpenAPI 3.1")},
        ),
        "get_metrics": Operation(
            "Every API and worker process's metrics (also at the root: `GET /metrics`)",
            "system",
            responses={
                "200": {
                    "description": "Prometheus' text format, or OpenMetrics when `Accept` asks",
                    "content": {
                        "text/plain": {"schema": _TEXT},
                        "application/openmetrics-text": {"schema": _TEXT},
                    },
                }
            },
        ),
    }
