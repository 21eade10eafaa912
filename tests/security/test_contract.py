"""One contract for every route (issue 34): a query parameter a route does not define is a
``400`` naming it, before any work (a misspelt ``dryrun`` never runs the real thing); state
changes of our own routes are ``POST``/``DELETE``, a ``GET`` on them ``405`` with ``Allow``."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from api.endpoint import Endpoint
from api.routes import ENDPOINTS, MOUNTED
from shared.raster.paths import encode_id
from shared.settings import Settings
from tests.checks import AUTH, assert_error
from tests.layers import MOSAIC_ID
from tests.security.test_grants import (
    KVP_QUERIES,
    OTHER_PATH_VALUES,
    RASTER_VALUES,
    VECTOR_MODULES,
    VECTOR_VALUES,
)

MOUNTS = ("/api-user", "/api/v1")
#: the path parameters that name neither a layer nor a tile, with a value of their form
ANY_PATH_VALUES = {
    "job_id": str(uuid.uuid4()),
    "run": str(uuid.uuid4()),
    "id": "1",  # a user's, a key's, a client's
    "path": "viewer.js",  # a file of the web pages
}
#: an unknown parameter's name
BOGUS = "dry_run"
#: the routes whose standard says to ignore the parameters they do not define
IGNORING = {"get_wms", "get_wmts", "get_wmts_capabilities", "get_wmts_tile"} | {
    "post_token",
    "get_authorize",
    "post_authorize",
}
#: the spec's own GET routes that start a job (spec 4.2, 4.3, 4.4, 4.7): they stay GET
SPEC_GET_JOBS = {"get_layer_pretile", "get_layer_compress", "get_raster_config", "get_speed_test"}


def request_to(
    endpoint: Endpoint, mount: str, layers: Mapping[str, str] | None = None
) -> tuple[str, str, dict[str, str]]:
    """Method, URL and query of a request of ``endpoint`` that names layer A where it names
    a layer (the admin key sees it) unless ``layers`` names another, and values of the right
    form elsewhere."""
    vector = endpoint.handler.__module__ in VECTOR_MODULES
    values = VECTOR_VALUES if vector else RASTER_VALUES
    named = {name: values[name][0] for name in endpoint.rule.layers} | dict(layers or {})
    route = endpoint.route()
    path = {
        name: named.get(name, OTHER_PATH_VALUES.get(name, ANY_PATH_VALUES.get(name)))
        for name in route.param_convertors
    }
    query = {name: value for name, value in named.items() if name not in path}
    query |= KVP_QUERIES.get(endpoint.name, {})
    return endpoint.method, mount + str(route.url_path_for(endpoint.name, **path)), query


def _routes() -> list[tuple[Endpoint, str]]:
    """Each endpoint with each place it answers at."""
    mounted = [(endpoint, mount) for endpoint in MOUNTED for mount in MOUNTS]
    return mounted + [(e, "") for e in ENDPOINTS if e.place == "root"]


@pytest.mark.usefixtures("no_tasks")
@pytest.mark.parametrize(
    ("endpoint", "mount"), _routes(), ids=lambda v: v.name if isinstance(v, Endpoint) else v
)
def test_an_unknown_parameter_is_400_naming_it_on_every_route(
    app: TestClient,
    rdb: redis.Redis,
    endpoint: Endpoint,
    mount: str,
) -> None:
    method, url, query = request_to(endpoint, mount)
    jobs = rdb.zcard("mapsvc:jobs")
    r = app.request(method, url, params={**query, BOGUS: "1"}, headers=AUTH)
    if endpoint.ignores_unknown:  # WMS 1.3.0 6.8.1, WMTS 1.0.0, RFC 6749 3.1: ignored
        assert BOGUS not in r.text, r.text
        return
    assert r.status_code == 400, (url, r.status_code, r.text)
    error = assert_error(r.json(), "invalid-input")
    assert error["detail"]["parameter"] == BOGUS
    assert f"unknown parameter {BOGUS}" in error["message"]
    assert "api_key" in error["message"]  # the known ones are listed
    assert rdb.zcard("mapsvc:jobs") == jobs  # nothing started


def test_only_the_standards_that_say_so_ignore_unknown_parameters() -> None:
    assert {e.name for e in ENDPOINTS if e.ignores_unknown} == IGNORING


def test_api_key_is_known_everywhere_and_every_unknown_one_is_named(app: TestClient) -> None:
    url = f"/api-user/gis-raster-stat/{MOSAIC_ID}"
    r = app.get(url, params={"api_key": "msk_" + "0" * 40})
    assert r.status_code == 401, r.text  # read as the credential it is, not refused as unknown
    r = app.get(url, params={"b": "1", "a": "1", "nocache": "1"}, headers=AUTH)
    error = assert_error(r.json(), "invalid-input")
    assert error["message"].startswith("unknown parameters a, b; this route knows ")
    assert error["detail"]["parameter"] == "a"
    # a path parameter is the path's: the query does not say it again
    r = app.get(url, params={"id": "c2luZ2xlL1JHQi5ieXRlLnRpZg"}, headers=AUTH)
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == "id"


@pytest.mark.usefixtures("no_tasks")
def test_an_optional_body_is_read_from_what_was_sent_not_from_the_headers(
    app: TestClient, settings: Settings
) -> None:
    url = f"/api-user/gis-layer-truncate/{MOSAIC_ID}"
    query = {"minzoom": 8, "maxzoom": 9, "dryrun": 1}
    whole = app.post(url, params=query, headers=AUTH).json()
    # a JSON content type and nothing sent: no body, the whole layer
    empty = app.post(url, params=query, headers={**AUTH, "Content-Type": "application/json"})
    assert empty.status_code == 200, empty.text
    assert empty.json() == whole
    # a polygon sent without its content type is refused, never dropped for the whole layer
    polygon = b'{"type": "Polygon", "coordinates": [[[-78, 24], [-77, 24], [-77, 25], [-78, 24]]]}'
    r = app.post(url, params=query, headers=AUTH, content=polygon)
    assert r.status_code == 400, r.text
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == "Content-Type"
    r = app.post(
        url, params=query, headers={**AUTH, "Content-Type": "application/json"}, content=polygon
    )
    assert r.status_code == 200, r.text
    assert r.json()["total"] < whole["total"]


@pytest.mark.usefixtures("no_tasks")
def test_state_changes_are_post_or_delete_and_a_get_on_them_is_405(
    app: TestClient,
    settings: Settings,
    rdb: redis.Redis,
) -> None:
    for endpoint in MOUNTED:
        if endpoint.job is not None and endpoint.name not in SPEC_GET_JOBS:
            assert endpoint.method != "GET", f"{endpoint.name} starts a job on GET"
    cached = settings.dirs.rtile / MOSAIC_ID / "en" / "8" / "72" / "110.png"
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(b"\x89PNG kept")
    jobs = rdb.zcard("mapsvc:jobs")
    run = str(uuid.uuid4())
    for mount in MOUNTS:
        for path, allowed in (
            (f"/gis-layer-truncate/{MOSAIC_ID}?minzoom=8&maxzoom=9", "POST"),
            (f"/gis-layer-export/{MOSAIC_ID}?minzoom=8&maxzoom=9", "POST"),
            (f"/gis-layer-expire/{MOSAIC_ID}?bbox=-78,24,-77,25", "POST"),
            ("/diag/probe?steps=1", "POST"),
            (f"/seeds/{run}/resume", "POST"),
            (f"/vtile/{VECTOR_VALUES['layer'][0]}/cache", "DELETE"),
        ):
            r = app.get(f"{mount}{path}", headers=AUTH)
            assert r.status_code == 405, (path, r.text)
            assert r.headers["allow"] == allowed
            error = assert_error(r.json(), "method-not-allowed")
            assert error["message"].endswith(f"allowed: {allowed}")
    assert Path(cached).read_bytes() == b"\x89PNG kept"  # a prefetcher's GET deleted nothing
    assert rdb.zcard("mapsvc:jobs") == jobs


#: a body of the right form, for the routes that need one
POLYGON = {"type": "Polygon", "coordinates": [[[-78, 24], [-77, 24], [-77, 25], [-78, 24]]]}
#: layers of the right form that are not there: a raster layer's id, a vector layer's
NOT_THERE = {"raster": encode_id("no-such/raster.tif"), "vector": "public.no_such_table"}


def test_a_handler_takes_a_layer_exactly_when_its_endpoint_resolves_one() -> None:
    for endpoint in ENDPOINTS:
        takes = "layer" in inspect.signature(endpoint.handler).parameters
        assert takes == (endpoint.resolves is not None), endpoint.name


@pytest.mark.usefixtures("no_tasks")
@pytest.mark.parametrize(
    "endpoint", [e for e in MOUNTED if e.resolves is not None], ids=lambda e: e.name
)
def test_a_layer_not_there_is_404_naming_its_parameter_before_the_handler_runs(
    app: TestClient, rdb: redis.Redis, endpoint: Endpoint
) -> None:
    named = endpoint.rule.layers[0]
    missing = NOT_THERE["vector" if endpoint.resolves == "vector" else "raster"]
    method, url, query = request_to(endpoint, "/api-user", {named: missing})
    body = POLYGON if isinstance(endpoint.body, type) and not endpoint.body_optional else None
    jobs = rdb.zcard("mapsvc:jobs")
    r = app.request(method, url, params=query, headers=AUTH, json=body)
    assert r.status_code == 404, (url, r.status_code, r.text)
    assert assert_error(r.json(), "not-found")["detail"]["parameter"] == named
    assert rdb.zcard("mapsvc:jobs") == jobs  # nothing started
