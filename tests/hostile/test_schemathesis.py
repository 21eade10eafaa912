"""The OpenAPI document describes every route; schemathesis runs it against the real server.

Against the live uvicorn server, a real Celery worker, the demo rasters (one configured as a
layer, the documented examples name it) and the vector tables: seeded, bounded examples of every
operation. Checks: no 5xx, documented status codes and content types, every body (errors too:
``{"error": {"code", "message", "detail"}}``) matching its schema. A job started by a generated
request is started with ``async=1`` and cancelled at once, so the worker stays free. Every request
carries the admin key (``AUTH``), so that every operation is exercised past authentication.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from xml.etree import ElementTree as ET

import httpx
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.routing import Route
from starlette.testclient import TestClient

from api.app import create_app
from api.openapi import openapi_document, openapi_path
from api.routes import ENDPOINTS, MOUNTED, ROUTES
from shared.settings import Settings
from tests.checks import AUTH

pytestmark = [pytest.mark.server, pytest.mark.worker]

#: the demo raster the documented examples name (``single/RGB.byte.tif``)
EXAMPLE_RASTER = "single/RGB.byte.tif"
#: operations that start a job: asked with ``async=1``, then their job is cancelled
JOB_OPERATIONS = {openapi_path(e.path) for e in ENDPOINTS if e.job is not None}
#: operations that read credentials of their own (client credentials, a login form): what the
#: case generated for its ``Authorization`` header is sent as it is there
OWN_CREDENTIALS = {"/oauth/token", "/oauth/authorize"}
#: the same operations answer refusals in shapes of their own, on purpose: the token endpoint
#: RFC 6749's (``{"error": "invalid_grant", "error_description": …}``, what OAuth clients
#: read), the authorize page HTML for people; their document says so
#: statuses that are not server bugs (each operation documents those it may answer)
EXPECTED_STATUSES = ["2XX", "3XX", "4XX", 502, 503, 520, 521, 522, 524]
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture
def app_client(settings: Settings) -> Iterator[TestClient]:
    """The API with its services (the document is built once by them, and its route spends
    the caller's documents budget); without credentials: the document is open to anyone."""
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        yield client


def test_every_route_is_documented(app_client: TestClient) -> None:
    for prefix in ("/api-user", "/api/v1"):
        response = app_client.get(f"{prefix}/openapi.json")
        assert response.status_code == 200
        document = response.json()
        assert document["openapi"].startswith("3.1")
        assert document["servers"] == [{"url": prefix}]
        missing = [
            f"{method} {route.path}"
            for route in ROUTES
            if isinstance(route, Route)
            for method in sorted((route.methods or set()) - {"HEAD"})
            if method.lower() not in document["paths"].get(openapi_path(route.path), {})
        ]
        assert missing == [], f"routes without an OpenAPI operation: {missing}"


def test_every_failure_is_documented_with_the_error_shape(app_client: TestClient) -> None:
    document = app_client.get("/api-user/openapi.json").json()
    error = document["components"]["schemas"]["ErrorResponse"]
    assert error["required"] == ["error"]
    assert document["components"]["schemas"]["ErrorBody"]["required"] == [
        "code",
        "message",
        "detail",
    ]
    for path, item in document["paths"].items():
        if path in OWN_CREDENTIALS:
            continue
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if int(status) < 400:
                    continue
                where = f"{method} {path} {status}"
                if path in ("/wms", "/wmts") or path.startswith("/wmts/"):  # OGC services
                    assert set(response["content"]) <= {"text/xml", "application/xml"}, where
                    continue
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorResponse"}, where


@pytest.fixture(scope="module")
def api_base(live_server: str, worker: Any, raster_dir: Any, vector_tables: str) -> str:
    """The live API, with the example raster configured as a layer."""
    configured = httpx.get(
        f"{live_server}/api-user/gis-raster/{EXAMPLE_RASTER}", headers=AUTH, timeout=120
    )
    assert configured.status_code == 200, configured.text
    return f"{live_server}/api-user"


# the document the server serves (same routes, same settings), loaded when pytest collects
schema = schemathesis.openapi.from_dict(
    openapi_document(MOUNTED, Settings(), "/api-user"),
    config=schemathesis.Config.from_dict(
        {
            "seed": 10,
            "suppress-health-check": ["all"],
            "request-timeout": 60,
            "max-stream-events": 3,
            # 5xx that are answers, not bugs: a dependency or provider down or not configured
            "checks": {"not_a_server_error": {"expected-statuses": EXPECTED_STATUSES}},
            "generation": {"max-examples": 20, "deterministic": True, "mode": "all"},
            "phases": {"coverage": {"enabled": False}, "stateful": {"enabled": False}},
            "operations": [
                {
                    # the stream of all jobs never ends: read it for 2 s, a few times
                    "include-path": "/events",
                    "request-timeout": 2,
                    "generation": {"max-examples": 3},
                },
                {
                    # nor does a layer's stream of its changes
                    "include-path": "/watches/{layer}/events",
                    "request-timeout": 2,
                    "generation": {"max-examples": 3},
                },
            ],
        }
    ),
)


def credentials(case: schemathesis.Case) -> dict[str, str] | None:
    """The headers a case is sent with besides its own: the admin key, unless it is an
    operation with credentials of its own and the case carries an ``Authorization`` already."""
    own = {name.lower() for name in case.headers or {}}
    if case.operation.path in OWN_CREDENTIALS and "authorization" in own:
        return None
    return AUTH


@schema.parametrize()
def test_api(case: schemathesis.Case, api_base: str) -> None:
    heavy = case.operation.path in JOB_OPERATIONS
    if heavy:
        case.query = {**(case.query or {}), "async": "1"}
    response = case.call_and_validate(base_url=api_base, headers=credentials(case), checks=CHECKS)
    # (the authorize page's refusals are HTML, which content_type_conformance checks)
    if response.status_code >= 400 and case.operation.path == "/oauth/token":
        refusal = response.json()
        assert isinstance(refusal["error"], str) or set(refusal["error"]) >= {"code", "message"}
    elif response.status_code >= 400 and "xml" in response.headers["content-type"][0]:
        report = ET.fromstring(response.content)  # an OGC service's (WMS, WMTS)
        assert report.tag.endswith("ExceptionReport"), response.text
    elif response.status_code >= 400 and case.operation.path not in OWN_CREDENTIALS:
        error = response.json()["error"]
        assert set(error) >= {"code", "message", "detail"}
    if heavy and response.status_code == 202:
        job = response.json()["id"]
        cancelled = httpx.delete(f"{api_base}/jobs/{job}", headers=AUTH, timeout=30)
        assert cancelled.status_code in (200, 202, 409), cancelled.text


LAYER = "c2luZ2xlL1JHQi5ieXRlLnRpZg"  # the id of EXAMPLE_RASTER
TILE = {"style": LAYER, "z": 8, "x": 72, "y": 110}
#: requests that answer 200 with a body, so that its schema is checked on real data (``GET``
#: unless the path starts with another method)
ANSWERS: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("/rtile/{style}/{lang}/{z}/{x}/{y}.png", {**TILE, "lang": "en"}, {}, "image/png"),
    ("/rtile/{style}/{z}/{x}/{y}.png", TILE, {"debug": "1"}, "application/json"),
    (
        "/rtile/{style}/{z}/{x}/{y}.png",
        TILE,
        {"BBOX": "-8738580,2753408,-8627261,2875745", "width": 300, "height": 200},
        "image/png",
    ),
    ("/gis-layer-pretile/{id}", {"id": LAYER}, {"dryrun": "1", "minzoom": 6, "maxzoom": 9}, ""),
    ("POST /gis-layer-truncate/{id}", {"id": LAYER}, {"dryrun": "1", "maxzoom": 9}, ""),
    ("/gis-raster", {}, {"folder": "single"}, "application/json"),
    ("/gis-raster-stat/{id}", {"id": LAYER}, {}, "application/json"),
    ("/gis-raster-info/{id}", {"id": LAYER}, {}, "application/json"),
    ("POST /diag/probe", {}, {"steps": 1, "delay_ms": 0}, "application/json"),
    ("/geojson/{layer}", {"layer": "public.countries"}, {"limit": 2}, "application/geo+json"),
    ("/gis-datasource/{layer}", {"layer": "public.countries"}, {}, "application/json"),
    (
        "/vtile/{layer}/{z}/{x}/{y}.pbf",
        {"layer": "public.countries", "z": 2, "x": 2, "y": 1},
        {},
        "application/vnd.mapbox-vector-tile",
    ),
    ("/height", {}, {"x": -109.2, "y": 10.3}, "application/json"),
    ("/ogc/collections", {}, {}, "application/json"),
    ("/wms", {}, {"SERVICE": "WMS", "REQUEST": "GetCapabilities"}, "text/xml"),
    ("/wmts/1.0.0/WMTSCapabilities.xml", {}, {}, "application/xml"),
]


@pytest.mark.parametrize(("path", "path_parameters", "query", "media_type"), ANSWERS)
def test_answers_match_the_document(
    api_base: str,
    path: str,
    path_parameters: dict[str, Any],
    query: dict[str, Any],
    media_type: str,
) -> None:
    method, path = path.split(" ") if " " in path else ("GET", path)
    case = schema[path][method].Case(path_parameters=path_parameters, query=query)
    response = case.call_and_validate(base_url=api_base, headers=AUTH, checks=CHECKS)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"][0].startswith(media_type)
