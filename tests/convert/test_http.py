"""``POST /api-user/pdf-merge``: the app in-process, the Convert server real, on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest
from starlette.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.conftest import admin_client, free_port
from tests.convert.conftest import StartServer
from tests.convert.pdfs import info_of, make_pdf, pages_of

A = make_pdf([(100, 200, "a1"), (110, 210, "a2")])
B = make_pdf([(300, 400, "b1")])


def _client(settings: Settings, address: str | None) -> TestClient:
    app = create_app(settings.model_copy(update={"convert_server_address": address}))
    return admin_client(app, raise_server_exceptions=False)


@pytest.fixture
def api(settings: Settings, start_server: StartServer) -> Iterator[TestClient]:
    """The API with a Convert server on the same work dir."""
    server = start_server(settings)
    with _client(settings, server.address) as tc:
        yield tc


@pytest.fixture
def docs(settings: Settings) -> str:
    """A folder of the work dir with a.pdf and b.pdf; its path relative to the work dir."""
    rel = f"convert-{uuid4().hex[:8]}"
    (settings.work_dir / rel).mkdir()
    (settings.work_dir / rel / "a.pdf").write_bytes(A)
    (settings.work_dir / rel / "b.pdf").write_bytes(B)
    return rel


def _error(response: object) -> dict[str, object]:
    body = response.json()  # type: ignore[attr-defined]
    assert set(body) == {"error"}
    error: dict[str, object] = body["error"]
    return error


def test_multipart_upload_is_merged_in_order(api: TestClient) -> None:
    response = api.post(
        "/api-user/pdf-merge",
        files=[
            ("files", ("b.pdf", B, "application/pdf")),
            ("files", ("a.pdf", A, "application/pdf")),
        ],
        data={"output_name": "report.pdf", "metadata": json.dumps({"Title": "Report"})},
        headers={"X-Request-ID": "http-merge-1"},
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/pdf"
    assert response.headers["content-disposition"] == 'attachment; filename="report.pdf"'
    assert response.headers["x-page-count"] == "3"
    assert response.headers["x-request-id"] == "http-merge-1"
    assert pages_of(response.content) == [(300, 400, "b1"), (100, 200, "a1"), (110, 210, "a2")]
    assert info_of(response.content)["/Title"] == "Report"


def test_json_paths_inside_the_work_dir(api: TestClient, docs: str) -> None:
    response = api.post("/api/v1/pdf-merge", json=[f"{docs}/a.pdf", f"{docs}/b.pdf"])
    assert response.status_code == 200, response.text
    assert pages_of(response.content) == [(100, 200, "a1"), (110, 210, "a2"), (300, 400, "b1")]
    assert response.headers["content-disposition"] == 'attachment; filename="merged.pdf"'
    response = api.post(
        "/api-user/pdf-merge",
        json={"paths": [f"{docs}/b.pdf", f"{docs}/b.pdf"], "output_name": "../two b.pdf"},
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-page-count"] == "2"
    assert response.headers["content-disposition"] == 'attachment; filename="_two b.pdf"'


def test_paths_escaping_the_work_dir_are_refused(
    api: TestClient, docs: str, settings: Settings, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.pdf"
    outside.write_bytes(A)
    (settings.work_dir / docs / "link.pdf").symlink_to(outside)
    for path in [f"{docs}/../../outside.pdf", "../x.pdf", str(outside), f"{docs}/link.pdf"]:
        response = api.post("/api-user/pdf-merge", json=[f"{docs}/a.pdf", path])
        assert response.status_code == 400, (path, response.text)
        error = _error(response)
        assert error["code"] == "invalid-input"
        assert error["detail"]["path"] == path  # type: ignore[index]
    response = api.post("/api-user/pdf-merge", json=[f"{docs}/nothing.pdf"])
    assert response.status_code == 404
    assert _error(response)["code"] == "not-found"


def test_bad_input_is_400(api: TestClient, docs: str) -> None:
    cases = [
        {"files": [("files", ("a.pdf", A, "application/pdf")), ("files", ("cat.png", b"\x89PNG"))]},
        {"files": [("files", ("bad.pdf", b"%PDF-1.7 but nothing else", "application/pdf"))]},
        {"json": []},
        {"json": {"paths": [1, 2]}},
        {"json": {"paths": [f"{docs}/a.pdf"], "metadata": {"Title": 3}}},
        {"json": {"paths": [f"{docs}/a.pdf"], "unknown": 1}},
        {"content": b"[not json", "headers": {"content-type": "application/json"}},
        {"content": b"a.pdf", "headers": {"content-type": "text/plain"}},
        {"data": {"colour": "red"}, "files": [("files", ("b.pdf", B, "application/pdf"))]},
    ]
    for case in cases:
        response = api.post("/api-user/pdf-merge", **case)  # type: ignore[arg-type]
        assert response.status_code == 400, (case, response.text)
        assert _error(response)["code"] == "invalid-input", response.text
    # the file is named: by the API's own check, and by the server's
    response = api.post("/api-user/pdf-merge", **cases[0])  # type: ignore[arg-type]
    assert "cat.png is not a PDF" in str(_error(response)["message"])
    response = api.post("/api-user/pdf-merge", **cases[1])  # type: ignore[arg-type]
    assert "bad.pdf is not a readable PDF" in str(_error(response)["message"])


def test_503_when_the_service_is_not_configured(settings: Settings) -> None:
    with _client(settings, None) as tc:
        response = tc.post("/api-user/pdf-merge", files=[("files", ("b.pdf", B))])
    assert response.status_code == 503
    error = _error(response)
    assert error["code"] == "unavailable"
    assert error["message"] == "convert service not configured"
    assert error["detail"] == {"service": "convert", "setting": "MAPSVC_CONVERT_SERVER_ADDRESS"}


def test_503_when_the_service_is_down(settings: Settings) -> None:
    with _client(settings, f"127.0.0.1:{free_port()}") as tc:
        response = tc.post("/api-user/pdf-merge", files=[("files", ("b.pdf", B))])
    assert response.status_code == 503
    error = _error(response)
    assert error["code"] == "unavailable"
    assert "unreachable" in str(error["message"])
    assert error["detail"]["grpc_status"] == "UNAVAILABLE"  # type: ignore[index]
