"""Failures of the services the API depends on name the right service."""

from __future__ import annotations

import pytest
import redis.exceptions
import sqlalchemy.exc
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from api.errors import install_error_handlers
from tests.checks import assert_error


@pytest.mark.parametrize(
    ("error", "service", "state"),
    [
        (redis.exceptions.ConnectionError("refused"), "Redis", "unreachable"),
        (redis.exceptions.TimeoutError("timed out"), "Redis", "unreachable"),
        (
            sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("down")),
            "PostgreSQL",
            "unreachable",
        ),
        (sqlalchemy.exc.TimeoutError("pool"), "PostgreSQL", "busy"),
    ],
)
def test_a_service_failure_is_503_naming_the_service(
    error: Exception, service: str, state: str
) -> None:
    async def fail(request: Request) -> Response:
        raise error

    app = Starlette(routes=[Route("/x", fail)])
    install_error_handlers(app)
    r = TestClient(app, raise_server_exceptions=False).get("/x")
    assert r.status_code == 503
    body = assert_error(r.json(), "unavailable")
    assert body["detail"] == {"service": service}
    assert body["message"] == f"{service} is {state}; try again later"
    assert int(r.headers["retry-after"]) >= 1
