"""Layer grants on every parameter and every job (issue 21, class 2).

A key limited to layer A (a raster folder layer and a vector layer) sees nothing of layer B,
whatever route or parameter names B: every route of the rule table is walked, on both mounts,
with each of its layer parameters naming B (``404`` as if B did not exist, B named nowhere in
the answer) and naming A (through the grant check). Jobs of B, and jobs about no layer, are
invisible to the key; jobs of A are not. A static check proves that every parameter a handler
reads that names a layer is one its rule names, so a new route or parameter cannot forget it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from starlette.testclient import TestClient

from api.endpoint import Endpoint
from api.routes import MOUNTED
from shared.raster.paths import encode_id
from tests.checks import AUTH, assert_error
from tests.layers import MOSAIC_ID

MOUNTS = ("/api-user", "/api/v1")
#: the layers granted to the limited keys, and the ones hidden from them
A_RASTER, B_RASTER = "bahamas-tiles", "single/world.rgb.tif"
A_VECTOR, B_VECTOR = "public.test_points", "public.test_lines"
B_ID = encode_id(B_RASTER)
#: what of B must never show in an answer to the limited keys
B_NAMES = (B_ID, "world.rgb", "test_lines")
#: per layer parameter of the raster routes, a value naming A and one naming B
RASTER_VALUES = {
    "id": (MOSAIC_ID, B_ID),
    "style": (MOSAIC_ID, B_ID),
    "layer": (MOSAIC_ID, B_ID),
    "path": (A_RASTER, B_RASTER),
    "file": (f"{A_RASTER}/rgb2.tif", B_RASTER),
    "folder": (A_RASTER, "single"),
    **dict.fromkeys(("LAYER", "LAYERS", "QUERY_LAYERS"), (MOSAIC_ID, B_ID)),  # WMTS, WMS
    "collectionId": (MOSAIC_ID, B_ID),  # OGC API: a raster collection (Tiles)
    "coverage_layer": (A_VECTOR, B_VECTOR),  # pre-tiling's coverage: a vector layer
}
#: the same for the vector routes
VECTOR_VALUES = {"layer": (A_VECTOR, B_VECTOR), "collectionId": (A_VECTOR, B_VECTOR)}
#: the modules of the vector routes (OGC API – Features: a vector collection)
VECTOR_MODULES = ("api.routes.vector", "api.routes.ogc_features", "api.routes.watch")
#: the path parameters that name no layer, with a value
OTHER_PATH_VALUES = {
    **{"z": "8", "x": "72", "y": "110", "lang": "en", "format": "webp"},
    **{"Style": "default", "TileMatrixSet": "GoogleMapsCompatible"},  # WMTS
    **{"TileMatrix": "8", "TileRow": "110", "TileCol": "72"},
    **{"tileMatrixSetId": "WebMercatorQuad", "tileMatrix": "8", "tileRow": "110"},  # OGC API
    **{"tileCol": "72", "featureId": "1"},
    **{"lon": "-77.7", "lat": "24.5"},  # a point of A's raster
    "name": "00000000-0000-4000-8000-000000000000.pmtiles",  # an export of A (see `app`)
}
#: the other query parameters of the OGC KVP routes: a request that draws the layer
KVP_QUERIES = {
    "get_wmts": {"REQUEST": "GetTile", "TILEMATRIXSET": "GoogleMapsCompatible"}
    | {"TILEMATRIX": "8", "TILEROW": "110", "TILECOL": "72", "FORMAT": "image/png"},
    "get_wms": {"REQUEST": "GetMap", "CRS": "EPSG:3857", "BBOX": "0,0,1000,1000"}
    | {"WIDTH": "8", "HEIGHT": "8", "FORMAT": "image/png"},
}


def limited_key(app: TestClient, role: str) -> dict[str, str]:
    """The header of a new key of ``role`` limited to A."""
    body = {"name": "limited", "role": role, "layers": [MOSAIC_ID, A_VECTOR]}
    r = app.post("/api-user/api-keys", json=body, headers=AUTH)
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['key']}"}


@pytest.fixture(scope="module")
def reader(app: TestClient) -> dict[str, str]:
    return limited_key(app, "reader")


@pytest.fixture(scope="module")
def operator(app: TestClient) -> dict[str, str]:
    return limited_key(app, "operator")


def refused_parameter(r: Any) -> str | None:
    """The parameter a refusal names: the error's, or an OGC exception report's locator."""
    if "xml" in r.headers["content-type"]:
        located = (e.get("locator") for e in ET.fromstring(r.content).iter())
        return next((name for name in located if name), None)
    parameter: str | None = r.json()["error"]["detail"].get("parameter")
    return parameter


def assert_hidden(r: Any) -> None:
    """A ``404`` that names nothing of B."""
    assert r.status_code == 404, (r.request.url, r.status_code, r.text)
    if "xml" not in r.headers["content-type"]:  # WMS and WMTS answer OGC exception reports
        assert_error(r.json(), "not-found")
    for name in B_NAMES:
        assert name not in r.text, (r.request.url, name)


# -- every route, every layer parameter --------------------------------------------------


def layer_endpoints() -> list[Endpoint]:
    """The endpoints of each mount whose rule names layer parameters (that every parameter
    naming a layer is in its rule: tests/api/test_endpoints.py)."""
    return [endpoint for endpoint in MOUNTED if endpoint.rule.layers]


def request_of(
    endpoint: Endpoint, mount: str, hidden: str | None
) -> tuple[str, str, dict[str, str]]:
    """Method, URL and query of a request of ``endpoint`` whose layer parameters name A, but
    for ``hidden``, which names B."""
    vector = endpoint.handler.__module__ in VECTOR_MODULES
    values = VECTOR_VALUES if vector else RASTER_VALUES
    named = {name: values[name][1 if name == hidden else 0] for name in endpoint.rule.layers}
    route = endpoint.route()
    path = {name: named.get(name, OTHER_PATH_VALUES.get(name)) for name in route.param_convertors}
    query = {name: value for name, value in named.items() if name not in path}
    query |= KVP_QUERIES.get(endpoint.name, {})
    return endpoint.method, mount + str(route.url_path_for(endpoint.name, **path)), query


@pytest.mark.usefixtures("no_tasks")
@pytest.mark.parametrize("mount", MOUNTS)
@pytest.mark.parametrize("endpoint", layer_endpoints(), ids=lambda endpoint: endpoint.name)
def test_a_parameter_naming_a_hidden_layer_is_404(
    app: TestClient,
    reader: dict[str, str],
    operator: dict[str, str],
    endpoint: Endpoint,
    mount: str,
) -> None:
    for hidden in endpoint.rule.layers:
        method, url, query = request_of(endpoint, mount, hidden)
        for key in (reader, operator):  # 404 before a role too low: B does not exist here
            r = app.request(method, url, params=query, headers=key)
            assert_hidden(r)
            assert refused_parameter(r) == hidden


@pytest.mark.parametrize("mount", MOUNTS)
@pytest.mark.parametrize("endpoint", layer_endpoints(), ids=lambda endpoint: endpoint.name)
def test_parameters_naming_the_granted_layer_pass_the_grant_check(
    app: TestClient, reader: dict[str, str], endpoint: Endpoint, mount: str
) -> None:
    method, url, query = request_of(endpoint, mount, None)
    r = app.request(method, url, params=query, headers=reader)
    # the reader gets what it may read; a route of operators (or admins) refuses its role, not
    # the layer
    expected = (403,) if endpoint.rule.role in ("operator", "admin") else (200, 204)
    assert r.status_code in expected, (url, query, r.text[:300])


def test_a_file_of_another_layer_is_404_to_anyone(app: TestClient) -> None:
    """``gis-raster-info/<A>?file=<B's file>`` is refused to the admin too: a file belongs to
    the layer named."""
    url = f"/api-user/gis-raster-info/{MOSAIC_ID}"
    assert app.get(url, params={"file": f"{A_RASTER}/rgb2.tif"}, headers=AUTH).status_code == 200
    r = app.get(url, params={"file": B_RASTER}, headers=AUTH)
    assert r.status_code == 404
    assert assert_error(r.json(), "not-found")["detail"] == {
        "parameter": "file",
        "layer": MOSAIC_ID,
    }


def test_an_unknown_vector_layer_names_no_other(app: TestClient) -> None:
    for headers in (AUTH, {}):
        r = app.get("/api-user/gis-datasource/public.nope", headers=headers)
        assert r.status_code in (401, 404)
        for name in ("test_lines", "test_points", "countries"):
            assert name not in r.text


# -- jobs ----------------------------------------------------------------------------------


@pytest.fixture
def jobs(app: TestClient, no_tasks: None) -> Iterator[dict[str, str]]:
    """Jobs the admin started: a speed test of A, one of B, a probe (about no layer); their
    tasks are never sent. All are cancelled at the end."""
    started = {}
    for name, method, url in (
        ("A", "GET", f"/api-user/gis-speed-test?layer={MOSAIC_ID}&async=1"),
        ("B", "GET", f"/api-user/gis-speed-test?layer={B_ID}&async=1"),
        ("none", "POST", "/api-user/diag/probe?async=1"),
    ):
        r = app.request(method, url, headers=AUTH)
        assert r.status_code == 202, r.text
        started[name] = r.json()["id"]
    yield started
    for job_id in started.values():
        app.delete(f"/api-user/jobs/{job_id}", headers=AUTH)


def test_jobs_record_the_layer_they_touch(app: TestClient, jobs: dict[str, str]) -> None:
    layers = {
        name: app.get(f"/api-user/jobs/{job_id}", headers=AUTH).json()["layer"]
        for name, job_id in jobs.items()
    }
    assert layers == {"A": MOSAIC_ID, "B": B_ID, "none": None}
    listed = app.get("/api-user/jobs", params={"layer": B_ID}, headers=AUTH).json()["jobs"]
    assert jobs["B"] in [job["id"] for job in listed]


@pytest.mark.parametrize("mount", MOUNTS)
def test_jobs_of_hidden_layers_do_not_exist_for_a_limited_key(
    app: TestClient,
    reader: dict[str, str],
    operator: dict[str, str],
    jobs: dict[str, str],
    mount: str,
) -> None:
    for key in (reader, operator):
        for hidden in (jobs["B"], jobs["none"]):
            for method, path in (
                ("GET", f"/jobs/{hidden}"),
                ("GET", f"/jobs/{hidden}/events"),
                ("DELETE", f"/jobs/{hidden}"),
            ):
                assert_hidden(app.request(method, mount + path, headers=key))
        assert_hidden(app.get(f"{mount}/jobs", params={"layer": B_ID}, headers=key))
        listed = app.get(f"{mount}/jobs", headers=key).json()["jobs"]
        # the operator: the jobs of A (the admin's, its own, other tests' exports of A's
        # vector layer); the reader: its own (none)
        of_a = {MOSAIC_ID, A_VECTOR}
        assert {job["layer"] for job in listed} <= (of_a if key is operator else set())
        assert not any(name in str(listed) for name in B_NAMES)
        # the stream of every job is for callers not limited to layers
        r = app.get(f"{mount}/events", headers=key)
        assert r.status_code == 403
        assert_error(r.json(), "forbidden")
    # the admin still sees and may cancel them
    assert app.get(f"{mount}/jobs/{jobs['B']}", headers=AUTH).status_code == 200


def test_jobs_of_the_granted_layer_are_an_operators(
    app: TestClient, reader: dict[str, str], operator: dict[str, str], jobs: dict[str, str]
) -> None:
    mine = jobs["A"]
    listed = app.get("/api/v1/jobs", params={"layer": MOSAIC_ID}, headers=operator).json()
    assert mine in [job["id"] for job in listed["jobs"]]
    assert mine in [job["id"] for job in app.get("/api/v1/jobs", headers=operator).json()["jobs"]]
    assert app.get(f"/api-user/jobs/{mine}", headers=operator).json()["layer"] == MOSAIC_ID
    assert_hidden(app.get(f"/api-user/jobs/{mine}", headers=reader))  # not its own
    r = app.delete(f"/api-user/jobs/{mine}", headers=operator)
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "cancelled"
    events = app.get(f"/api/v1/jobs/{mine}/events", headers=operator)
    assert events.status_code == 200
    assert "data: Finish:cancelled" in events.text


@pytest.mark.usefixtures("no_tasks")
def test_a_limited_operator_starts_jobs_on_its_layers_only(
    app: TestClient, operator: dict[str, str]
) -> None:
    assert_hidden(app.get(f"/api-user/gis-speed-test?layer={B_ID}&async=1", headers=operator))
    r = app.get(f"/api-user/gis-speed-test?layer={MOSAIC_ID}&async=1", headers=operator)
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["layer"] == MOSAIC_ID
    assert app.delete(f"/api-user/jobs/{job['id']}", headers=operator).status_code == 200
