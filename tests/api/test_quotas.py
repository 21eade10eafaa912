"""Budgets on a small app of endpoints: budgets, callers, refusals, and Redis down; and the
budget each route of the API declares."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from types import SimpleNamespace

import pytest
import redis.asyncio as aioredis
import redis.exceptions
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from api.access import Rule
from api.app import create_app
from api.endpoint import Endpoint
from api.endpoint import routes as routes_of
from api.quotas import Budget, Budgets
from api.scope import PRINCIPAL_KEY
from shared.auth.principal import ANONYMOUS, Principal
from shared.settings import AuthSettings, Settings
from tests.conftest import REDIS_URL, free_port

LIMITS = AuthSettings(
    rate_tiles_per_min=3,
    rate_data_per_min=2,
    rate_providers_per_min=5,
    rate_jobs_per_min=1,
    rate_documents_per_min=100,
    _env_file=None,  # type: ignore[call-arg]
)


class PrincipalFromHeader:
    """Stands for authentication: ``X-Test-User: <id>`` is that user; no header, anonymous."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            user = dict(scope["headers"]).get(b"x-test-user", b"").decode()
            principal = Principal(id=f"user:{user}", name=user, role="reader") if user else None
            scope[PRINCIPAL_KEY] = principal or ANONYMOUS
        await self.app(scope, receive, send)


async def ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def _endpoints(routes: dict[str, Budget]) -> list[BaseRoute]:
    """Endpoints answering ``ok`` with these budgets, their principal set by the test's
    middleware (``own_credentials``: no authentication runs)."""
    endpoints = [
        Endpoint("GET", path, ok, rule=Rule(None), budget=budget, own_credentials=True, name=path)
        for path, budget in routes.items()
    ]
    return list(routes_of(endpoints, root=False))


def make_app(redis_url: str) -> Starlette:
    """Budgets as the API keeps them: counted in the lifespan's Redis client."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        client = aioredis.Redis.from_url(redis_url, decode_responses=True)
        app.state.services = SimpleNamespace(budgets=Budgets(LIMITS, client))
        yield
        await client.aclose()

    routes = _endpoints(
        {
            "/rtile/{path:path}": "tiles",
            "/geojson/{layer}": "data",
            "/gis-raster/{path:path}": "jobs",
            "/health": "documents",
        }
    )
    return Starlette(
        routes=[Mount("/api-user", routes=routes), Mount("/api/v1", routes=routes)],
        middleware=[Middleware(PrincipalFromHeader)],
        lifespan=lifespan,
    )


def client_at(address: str, redis_url: str = REDIS_URL) -> TestClient:
    return TestClient(make_app(redis_url), client=(address, 50000))


@pytest.fixture
def address() -> str:
    """A client address of this test alone (other sessions may share the Redis db)."""
    return f"client-{uuid.uuid4().hex}"


@pytest.fixture
def tc(address: str) -> Iterator[TestClient]:
    with client_at(address) as client:
        yield client


def user() -> dict[str, str]:
    return {"X-Test-User": uuid.uuid4().hex}


def test_refusal_after_the_budget(tc: TestClient) -> None:
    me = user()
    answers = [tc.get("/api-user/rtile/osm/1/0/0.png", headers=me) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert [a.headers["RateLimit-Remaining"] for a in answers] == ["2", "1", "0"]
    assert all(a.headers["RateLimit-Limit"] == "3" for a in answers)
    assert answers[0].headers["RateLimit-Reset"] == "20"  # one tile drains in 60 / 3 s
    refused = tc.get("/api-user/rtile/osm/1/0/1.png", headers=me)
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "rate-limited"
    assert "tiles" in error["message"]
    assert error["detail"]["budget"] == "tiles"
    assert error["detail"]["limit"] == 3
    assert 19 <= int(refused.headers["Retry-After"]) <= 20
    assert error["detail"]["retry_after_s"] == int(refused.headers["Retry-After"])
    assert refused.headers["RateLimit-Limit"] == "3"
    assert refused.headers["RateLimit-Remaining"] == "0"
    assert 59 <= int(refused.headers["RateLimit-Reset"]) <= 60
    # the same budget under the versioned mount
    assert tc.get("/api/v1/rtile/osm/1/0/1.png", headers=me).status_code == 429


def test_budgets_are_separate(tc: TestClient) -> None:
    me = user()
    for _ in range(3):
        tc.get("/api-user/rtile/a.png", headers=me)
    assert tc.get("/api-user/rtile/a.png", headers=me).status_code == 429
    data = tc.get("/api-user/geojson/x", headers=me)
    assert data.status_code == 200
    assert data.headers["RateLimit-Limit"] == "2"
    assert data.headers["RateLimit-Remaining"] == "1"
    # gis-raster lists (data), gis-raster/<path> configures (jobs: one a minute)
    assert tc.get("/api-user/gis-raster/a.tif", headers=me).headers["RateLimit-Limit"] == "1"
    assert tc.get("/api-user/gis-raster/b.tif", headers=me).status_code == 429
    assert tc.get("/api-user/geojson/x", headers=me).headers["RateLimit-Remaining"] == "0"


def test_principals_are_separate(tc: TestClient) -> None:
    me, you = user(), user()
    for _ in range(2):
        assert tc.get("/api-user/geojson/x", headers=me).status_code == 200
    assert tc.get("/api-user/geojson/x", headers=me).status_code == 429
    yours = tc.get("/api-user/geojson/x", headers=you)
    assert yours.status_code == 200
    assert yours.headers["RateLimit-Remaining"] == "1"
    # and no caller spends an anonymous address's budget
    assert tc.get("/api-user/geojson/x").headers["RateLimit-Remaining"] == "1"


def test_anonymous_callers_are_keyed_by_address(tc: TestClient, address: str) -> None:
    spoof = {"X-Forwarded-For": "203.0.113.9"}
    for _ in range(2):
        assert tc.get("/api-user/geojson/x", headers=spoof).status_code == 200
    assert tc.get("/api-user/geojson/x").status_code == 429  # X-Forwarded-For is not trusted
    with client_at(f"{address}-other") as elsewhere:
        answer = elsewhere.get("/api-user/geojson/x")
        assert answer.status_code == 200
        assert answer.headers["RateLimit-Remaining"] == "1"


def test_open_routes_spend_a_budget_too(tc: TestClient) -> None:
    for left in range(99, 89, -1):
        answer = tc.get("/api-user/health")
        assert answer.status_code == 200
        assert answer.headers["RateLimit-Limit"] == "100"
        assert answer.headers["RateLimit-Remaining"] == str(left)


def _budget_of(method: str, path: str) -> Budget:
    """The budget of the API's endpoint that answers ``method path``."""
    scope = {"type": "http", "method": method, "path": path, "root_path": ""}
    for mount in create_app(Settings()).router.routes:
        match, child = mount.matches(scope)
        if isinstance(mount, Mount) and match is not Match.NONE:
            for route in mount.routes:
                if route.matches({**scope, **child})[0] is Match.FULL:
                    assert isinstance(route, Route)
                    endpoint = route.endpoint.__self__  # type: ignore[attr-defined]
                    assert isinstance(endpoint, Endpoint)
                    return endpoint.budget
    raise AssertionError(f"no route {method} {path}")


def test_budget_table() -> None:
    cases = {
        ("GET", "/api-user/rtile/abc/1/0/0.png"): "tiles",
        ("GET", "/api/v1/vtile/roads/1/0/0.pbf"): "tiles",
        ("DELETE", "/api-user/vtile/roads/cache"): "jobs",
        ("GET", "/api-user/gis-raster"): "data",
        ("GET", "/api-user/gis-raster/a/b.tif"): "jobs",
        ("GET", "/api-user/gis-raster-info/abc"): "data",
        ("GET", "/api-user/dzk.api"): "providers",
        ("GET", "/api-user/gis-url-proxy"): "providers",
        ("POST", "/api-user/pdf-merge"): "jobs",
        ("POST", "/api-user/diag/probe"): "jobs",
        ("GET", "/api-user/openapi.json"): "documents",
        ("GET", "/api-user/jobs/abc/events"): "data",
        ("POST", "/api-user/oauth/token"): "auth",
        ("GET", "/api-user/users"): "admin",
        ("GET", "/api-user/metrics"): "admin",
    }
    assert {case: _budget_of(*case) for case in cases} == cases


def test_redis_down_lets_requests_through(address: str, caplog: pytest.LogCaptureFixture) -> None:
    with client_at(address, f"redis://127.0.0.1:{free_port()}/0") as down:
        answers = [down.get("/api-user/rtile/a.png", headers=user()) for _ in range(5)]
    assert [(a.status_code, a.text) for a in answers] == [(200, "ok")] * 5
    assert all("RateLimit-Limit" not in a.headers for a in answers)
    warnings = [r for r in caplog.records if "rate limits off" in r.getMessage()]
    assert len(warnings) == 1


class FailingRedis:
    """A Redis client whose every command fails with ``error``, counting the attempts."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls = 0

    async def evalsha(self, *args: object) -> None:
        self.calls += 1
        raise self.error


@pytest.mark.parametrize(
    ("error", "calls"),
    [
        (redis.exceptions.ConnectionError("down"), 1),  # then Redis is left alone a while
        (redis.exceptions.MaxConnectionsError("pool busy"), 5),  # not an outage: ask each time
    ],
)
def test_redis_failures_pass_and_pause(error: Exception, calls: int) -> None:
    fake = FailingRedis(error)
    app = Starlette(routes=_endpoints({"/api-user/geojson/{layer}": "data"}))
    app.state.services = SimpleNamespace(budgets=Budgets(LIMITS, fake))  # type: ignore[arg-type]
    with TestClient(app) as client:
        assert [client.get("/api-user/geojson/x").status_code for _ in range(5)] == [200] * 5
    assert fake.calls == calls
