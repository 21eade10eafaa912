"""One declaration per endpoint: every route declared whole, the document sound, and the document
and the parsing agreeing on every bounded parameter (issue 23)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, get_args
from xml.etree import ElementTree as ET

import pytest
from openapi_spec_validator import validate
from starlette.testclient import TestClient

from api.access import LAYER_PARAMETERS
from api.endpoint import Endpoint
from api.openapi import openapi_document
from api.quotas import Budget
from api.routes import ENDPOINTS, MOUNTED, ROOT_ROUTES, ROUTES
from shared.settings import Settings

#: parameters with the name of a layer parameter that name something else
NOT_LAYERS = {
    ("get_web_asset", "path"),  # a file of the web pages
    ("get_geojson", "id"),  # feature ids of the layer the path names
    ("get_vtile", "id"),
    ("get_datasource", "id"),  # carried into its tile URLs
    *(
        (f"{verb}_{collection}", "id")  # a user's, a key's, a client's
        for collection in ("users", "api_keys", "oauth_clients")
        for verb in ("get", "put", "delete")
    ),
}
#: names a parameter naming a layer, a raster, a file, a folder or a style would have: those
#: without a reader in LAYER_PARAMETERS must get one before a rule can name them
LAYER_NAMES = set(LAYER_PARAMETERS) | {"raster", "rasters", "layers", "styles", "dir", "source"}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    """The document, its parameters declared in the components written where they are used."""
    found = openapi_document(MOUNTED, Settings(), "/api-user")
    declared = found["components"]["parameters"]
    for item in found["paths"].values():
        for operation in item.values():
            operation["parameters"] = [
                declared[p["$ref"].rsplit("/", 1)[1]] if "$ref" in p else p
                for p in operation["parameters"]
            ]
    return found


def test_every_endpoint_is_declared_whole() -> None:
    seen: set[tuple[str, str, str]] = set()
    for endpoint in ENDPOINTS:
        assert endpoint.budget in get_args(Budget), endpoint.name  # every route spends one
        if endpoint.documented:
            assert endpoint.answer, f"{endpoint.name} documents no answer"
            assert endpoint.summary, f"{endpoint.name} has no summary"
            assert endpoint.tag, f"{endpoint.name} has no tag"
        key = (endpoint.place, endpoint.method, endpoint.path)
        assert key not in seen, f"{endpoint.name}: declared twice"
        seen.add(key)
    names = [e.name for e in ENDPOINTS]
    assert len(names) == len(set(names)), "route names are unique"


def test_the_routes_are_the_endpoints() -> None:
    """Both mounts and the root are derived from the endpoints, never listed apart."""
    assert [r.name for r in ROUTES] == [e.name for e in MOUNTED]  # type: ignore[attr-defined]
    at_root = [e.name for e in ENDPOINTS if e.place != "mounts"]
    assert [r.name for r in ROOT_ROUTES] == at_root  # type: ignore[attr-defined]


def _parameters(endpoint: Endpoint) -> Iterator[str]:
    if endpoint.query is not None:
        for name, field in endpoint.query.model_fields.items():
            yield field.alias or name


def test_every_layer_parameter_is_checked_by_the_rule() -> None:
    """A parameter that names a layer, raster, file or folder is one the rule checks."""
    for endpoint in ENDPOINTS:
        declared = set(_parameters(endpoint))
        assert set(endpoint.rule.layers) <= declared, f"{endpoint.name}: rule names unknown"
        for name in declared & LAYER_NAMES:
            if (endpoint.name, name) not in NOT_LAYERS:
                assert name in endpoint.rule.layers, f"{endpoint.name}: {name} is not checked"


def _refs(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def test_the_document_is_sound(document: dict[str, Any]) -> None:
    validate(document)  # openapi-spec-validator: OpenAPI 3.1 and its JSON Schema dialect
    schemas = document["components"]["schemas"]
    dangling = {ref for ref in _refs(document) if ref.split("/")[-1] not in schemas}
    assert dangling == set()
    for body in ("KeyIn", "ClientIn", "UserIn", "KeyPatch", "ClientPatch", "UserPatch"):
        assert body in schemas


def test_every_endpoint_is_in_the_document(document: dict[str, Any]) -> None:
    for endpoint in MOUNTED:
        if endpoint.documented:
            path = re.sub(r":\w+}", "}", endpoint.path)
            operation = document["paths"][path][endpoint.method.lower()]
            assert operation["operationId"] == endpoint.name
            answers = [s for s in operation["responses"] if s[0] in "23"]
            assert answers, f"{endpoint.name} documents no answer but errors"


#: bounded parameters of which not every value in the bounds names something: their refusals
#: outside the bounds are checked, not their ends
SPARSE = {"srid": "an EPSG code: 1..2^31-1 holds every code, not every number is one"}
#: bounded parameters whose value above the maximum is the maximum, not an error
CLAMPED = {"limit": "OGC API – Features /req/core/fc-limit-response-1"}


def _bounded(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any], str]]:
    """Every documented bounded number parameter: (method, path, operation, parameter)."""
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for parameter in operation["parameters"]:
                schema = parameter.get("schema", {})
                if schema.get("type") in ("integer", "number") and (
                    "minimum" in schema or "maximum" in schema
                ):
                    yield method.upper(), path, operation, parameter["name"]


def _example(parameter: dict[str, Any]) -> str:
    """A value of a parameter that its schema allows."""
    schema = parameter["schema"]
    if "example" in parameter:
        return str(parameter["example"])
    if "enum" in schema:
        return str(schema["enum"][-1])
    if schema.get("type") in ("integer", "number"):
        return str(schema.get("minimum", 1))
    return "en" if parameter["name"] == "lang" else "a"


#: bounds that hold only when another parameter is at the same end of its range: a column or
#: row at zoom z, a first zoom below the end zoom
DEPENDS = {
    **{"x": "z", "y": "z", "minzoom": "maxzoom", "maxzoom": "minzoom"},
    **{"TileRow": "TileMatrix", "TileCol": "TileMatrix"},  # WMTS
    **{"tileRow": "tileMatrix", "tileCol": "tileMatrix"},  # OGC API – Tiles
}


def _request(
    client: TestClient,
    method: str,
    path: str,
    operation: dict[str, Any],
    name: str,
    value: str,
    end: str = "",
) -> tuple[int, Any]:
    """Ask ``operation`` with ``name`` set to ``value`` and every other required parameter at
    an allowed value (the one it depends on at the ``end`` of its range, ``minimum`` or
    ``maximum``, when given); the status and the parameter a ``400`` names."""
    query: dict[str, str] = {}
    for parameter in operation["parameters"]:
        given, wanted = _example(parameter), parameter["required"]
        if parameter["name"] == name:
            given, wanted = value, True
        elif end and parameter["name"] == DEPENDS.get(name):
            given, wanted = str(parameter["schema"][end]), True
        if parameter["in"] == "path":
            path = path.replace("{" + parameter["name"] + "}", given)
        elif parameter["in"] == "query" and wanted:
            query[parameter["name"]] = given
    if "async" in {p["name"] for p in operation["parameters"]}:
        query["async"] = "1"  # a job started at an allowed value waits for no worker
    response = client.request(method, f"/api-user{path}", params=query)
    if response.status_code == 202:  # a job recorded, never sent (`no_tasks`): cancelled
        # (202 while a worker of another test module is alive: the API cannot tell it idle)
        assert client.delete(f"/api-user/jobs/{response.json()['id']}").status_code in (200, 202)
    named = None
    if response.status_code == 400 and "xml" in response.headers["content-type"]:  # WMS, WMTS
        located = (e.get("locator") for e in ET.fromstring(response.content).iter())
        named = next((name for name in located if name), None)
    elif response.status_code == 400:
        named = response.json()["error"]["detail"].get("parameter")
    return response.status_code, named


@pytest.fixture
def no_tasks(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs are recorded but their tasks never sent: the queue of the suite's worker stays as
    it was (a probe of 1,000 steps at the documented maximum would hold it for minutes)."""
    celery = client.app.state.services.jobs.celery  # type: ignore[attr-defined]
    monkeypatch.setattr(celery, "send_task", lambda *args, **kwargs: None)


@pytest.mark.usefixtures("no_tasks")
def test_the_document_and_the_parsing_agree_on_every_bound(
    client: TestClient, document: dict[str, Any]
) -> None:
    """For every documented bounded parameter: min - 1, max + 1 and a word are ``400`` naming
    it; the documented min and max are not refused for it."""
    checked = 0
    for method, path, operation, name in _bounded(document):
        parameter = next(p for p in operation["parameters"] if p["name"] == name)
        schema = parameter["schema"]
        step = 1 if schema["type"] == "integer" else 0.5
        refused = ["word"]
        allowed = []
        if "minimum" in schema:
            refused.append(str(schema["minimum"] - step))
            allowed.append(("minimum", str(schema["minimum"])))
        if "maximum" in schema:
            beyond = str(schema["maximum"] + step)
            if name in CLAMPED and path.endswith("/items"):  # taken as the maximum
                allowed.append(("maximum", beyond))
            else:
                refused.append(beyond)
            allowed.append(("maximum", str(schema["maximum"])))
        for value in refused:
            status, named = _request(client, method, path, operation, name, value)
            assert (status, named) == (400, name), f"{method} {path} {name}={value}"
        for end, value in [] if name in SPARSE else allowed:
            status, named = _request(client, method, path, operation, name, value, end)
            assert not (status == 400 and named == name), f"{method} {path} {name}={value}"
        checked += 1
    assert checked >= 10  # the tiles, jobs, providers, vector and raster routes have bounds
