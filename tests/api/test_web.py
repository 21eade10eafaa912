"""The front door and the web pages' files (``api.routes.web``), without a browser.

The pages are served from a build of ``api/web`` made up here (``DIST`` points at it), so these
tests need no npm; ``tests/browser/test_viewer.py`` runs the real build in Chromium.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import api.routes.web as web
from api.app import create_app
from shared.settings import Settings
from tests.checks import PYPROJECT_VERSION, assert_error

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"


@pytest.fixture
def dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    built = tmp_path / "dist"
    built.mkdir()
    (built / "viewer.html").write_text("<!doctype html><title>viewer</title>")
    (built / "docs.html").write_text("<!doctype html><title>docs</title>")
    (built / "viewer.js").write_text("export const answer = 42;\n" * 50)
    (built / "viewer.js.gz").write_bytes(gzip.compress((built / "viewer.js").read_bytes()))
    (built / "notes.txt").write_text("not a web file")
    (built / ".hidden.js").write_text("hidden")
    monkeypatch.setattr(web, "DIST", built)
    return built


@pytest.mark.parametrize(
    ("accept", "query", "json"),
    [
        (BROWSER, "", False),
        ("application/json", "", True),
        ("*/*", "", True),
        ("", "", True),
        ("text/html", "", False),
        ("application/json;q=0.5, text/html", "", False),
        ("text/html;q=0.5, application/json", "", True),
        ("text/*, application/json;q=0.2", "", False),
        (BROWSER, "?f=json", True),
        ("application/json", "?f=html", False),
    ],
)
def test_front_door_answers_html_or_json_by_accept(
    client: TestClient, accept: str, query: str, json: bool
) -> None:
    for prefix in ("", "/api-user", "/api/v1"):
        r = client.get(f"{prefix}/{query}", headers={"Accept": accept})
        assert r.status_code == 200
        assert "Accept" in r.headers["vary"]
        if json:
            assert r.headers["content-type"] == "application/json"
            body = r.json()
            assert (body["service"], body["version"]) == ("mapsvc", PYPROJECT_VERSION)
        else:
            assert r.headers["content-type"] == "text/html; charset=utf-8"
            assert f"version {PYPROJECT_VERSION}" in r.text


def test_front_door_links(client: TestClient, settings: Settings) -> None:
    body = client.get("/api/v1/", headers={"Accept": "application/json"}).json()
    links = {link["rel"]: link for link in body["links"]}
    assert {rel: link["href"] for rel, link in links.items()} == {
        "viewer": "/viewer",
        "service-doc": "/docs",
        "service-desc": "/api/v1/openapi.json",
        "ready": "/api/v1/ready",
        "health": "/api/v1/health",
        "flower": f"http://testserver:{settings.flower_port}/",  # the host asked, Flower's port
    }
    assert links["service-desc"]["type"].startswith("application/vnd.oai.openapi+json")
    page = client.get("/", headers={"Accept": BROWSER}).text
    assert '<a rel="viewer" href="/viewer">' in page
    assert '<a rel="service-desc" href="/api-user/openapi.json">' in page


def test_front_door_links_under_the_public_url(settings: Settings) -> None:
    public = settings.model_copy(update={"public_url": "https://maps.example.org"})
    with TestClient(create_app(public)) as tc:
        body = tc.get("/", headers={"Accept": "application/json"}).json()
    links = {link["rel"]: link["href"] for link in body["links"]}
    assert links["viewer"] == "https://maps.example.org/viewer"
    assert links["service-desc"] == "https://maps.example.org/api-user/openapi.json"
    assert links["flower"] == f"http://maps.example.org:{settings.flower_port}/"


def test_front_door_is_in_the_openapi_document(client: TestClient) -> None:
    document = client.get("/api-user/openapi.json").json()
    operation = document["paths"]["/"]["get"]
    assert operation["operationId"] == "get_front"
    assert operation["security"] == []
    assert set(operation["responses"]["200"]["content"]) == {"application/json", "text/html"}


def test_front_door_refuses_an_unknown_form(client: TestClient) -> None:
    r = client.get("/?f=xml")
    assert r.status_code == 400
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == "f"


@pytest.mark.usefixtures("dist")
def test_pages_are_at_the_root_only_and_not_in_the_openapi_document(client: TestClient) -> None:
    paths = client.get("/api-user/openapi.json").json()["paths"]
    assert not {"/viewer", "/docs", "/web/{path}"} & set(paths)
    for path in ("/viewer", "/docs", "/web/viewer.js"):
        assert client.get(path).status_code == 200
        assert client.get(f"/api-user{path}").status_code == 404


@pytest.mark.usefixtures("dist")
def test_pages_and_files_of_the_build(client: TestClient) -> None:
    for path, title in (("/viewer", "viewer"), ("/docs", "docs")):
        r = client.get(path, headers={"Authorization": ""})  # open to anyone
        assert r.status_code == 200
        assert f"<title>{title}</title>" in r.text
        assert r.headers["content-type"] == "text/html; charset=utf-8"
        assert "script-src 'self'" in r.headers["content-security-policy"]
    plain = {"Accept-Encoding": "identity"}
    r = client.get("/web/viewer.js", headers=plain)
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/javascript; charset=utf-8"
    assert "content-encoding" not in r.headers
    again = client.get("/web/viewer.js", headers={**plain, "If-None-Match": r.headers["etag"]})
    assert again.status_code == 304
    packed = client.get("/web/viewer.js", headers={"Accept-Encoding": "gzip"})
    assert packed.headers["content-encoding"] == "gzip"
    assert packed.headers["etag"] != r.headers["etag"]  # another representation
    assert packed.text == r.text  # decoded by the client


@pytest.mark.usefixtures("dist")
@pytest.mark.parametrize(
    "path",
    [
        "/web/notes.txt",  # not a kind of file the pages have
        "/web/.hidden.js",
        "/web/missing.js",
        "/web/..%2Fviewer.html",
        "/web/%2e%2e/%2e%2e/pyproject.toml",
        "/web//etc/passwd.js",
    ],
)
def test_files_outside_the_build_are_not_found(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert r.status_code == 404, r.text
    assert_error(r.json(), "not-found")


def test_without_a_build_the_pages_say_how_to_make_one(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web, "DIST", tmp_path / "never-built")
    with TestClient(create_app(settings), raise_server_exceptions=False) as tc:
        assert tc.get("/api-user/health").status_code == 200  # the API runs on
        assert tc.get("/", headers={"Accept": BROWSER}).status_code == 200  # needs no build
        for path in ("/viewer", "/docs", "/web/viewer.js"):
            r = tc.get(path)
            assert r.status_code == 503
            error = assert_error(r.json(), "unavailable")
            assert "make web" in error["message"]
            assert error["detail"] == {"build": "make web", "dist": "api/web/dist"}
