"""Hostile uploads, Convert calls and proxied answers: each refused cleanly, nothing lost.

``pdf-merge`` runs against a real Convert server and a real uvicorn server (raw sockets send
lying ``Content-Length`` headers and endless chunked bodies); the proxy fetches from the fake
providers' server on loopback.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import select
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from uuid import uuid4

import grpc
import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.testclient import TestClient

from api.app import create_app
from shared.convert._pb import convert_pb2
from shared.convert.client import ConvertClient, PdfFile
from shared.convert.server import ConvertServicer, build_server
from shared.convert.wire import MAX_WORKERS
from shared.errors import UnavailableError
from shared.settings import Settings
from tests.checks import ADMIN_KEY, AUTH, HEALTHY, assert_error
from tests.conftest import admin_client, app_client, free_port
from tests.convert.pdfs import make_pdf, pages_of
from tests.providers import fakes

PDF = make_pdf([(100, 200, "one")])
MIB = 1024 * 1024
#: small caps, above the 1 MiB at which Starlette spools an uploaded file to disk
MAX_BODY = 8 * MIB
MAX_FILE = 2 * MIB
BOUNDARY = "hostile-boundary"


@dataclass
class Merge:
    """The API on a real socket, its Convert server, and the folders nothing may be left in."""

    base: str
    port: int
    servicer: ConvertServicer
    settings: Settings
    tmp: Path


@contextmanager
def _served(app: Starlette) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield base
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def merge(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Merge]:
    capped = settings.model_copy(
        update={"upload_max_bytes": MAX_BODY, "upload_max_file_bytes": MAX_FILE}
    )
    servicer = ConvertServicer(capped)
    server, port = build_server(capped, 0, servicer=servicer)
    server.start()
    capped = capped.model_copy(update={"convert_server_address": f"127.0.0.1:{port}"})
    # uploads spooled to disk by the multipart parser land here, where the tests look
    tmp = tmp_path_factory.mktemp("spool")
    saved, tempfile.tempdir = tempfile.tempdir, str(tmp)
    try:
        with _served(create_app(capped)) as base:
            yield Merge(base, int(base.rsplit(":", 1)[1]), servicer, capped, tmp)
    finally:
        tempfile.tempdir = saved
        server.stop(None).wait(10)


def _files(root: Path) -> set[str]:
    """The work dir's files, less the metrics any process of the suite may start writing."""
    return {
        name
        for name in (str(p.relative_to(root)) for p in root.rglob("*"))
        if name.split("/", 1)[0] != "metrics"
    }


def _open_in(folder: Path) -> list[str]:
    """Files of this process still open in ``folder`` (deleted temporary files too)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder)):
            found.append(target)
    return found


@contextmanager
def _nothing_lost(merge: Merge) -> Iterator[None]:
    """The block leaves no file in the work dir or the spool folder, none open; merges work."""
    work_before = _files(merge.settings.work_dir)
    yield
    deadline = time.monotonic() + 5  # the server closes its spooled files as it unwinds
    while _open_in(merge.tmp) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _open_in(merge.tmp) == []
    assert list(merge.tmp.iterdir()) == []
    assert _files(merge.settings.work_dir) == work_before
    r = httpx.get(f"{merge.base}/api-user/health", headers=AUTH, timeout=5)
    assert r.json() == HEALTHY
    r = httpx.post(
        f"{merge.base}/api-user/pdf-merge",
        files=[("files", ("a.pdf", PDF))],
        headers=AUTH,
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert pages_of(r.content) == [(100, 200, "one")]


def _multipart_head(name: str = "big.pdf") -> bytes:
    return (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
        "Content-Type: application/pdf\r\n\r\n"
    ).encode() + PDF


def _request_head(port: int, extra: str) -> bytes:
    return (
        f"POST /api-user/pdf-merge HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {ADMIN_KEY}\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n{extra}\r\n"
    ).encode()


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "connection closed in the body"
        body += chunk
    return int(status_line.split()[1]), headers, body


def _assert_too_large(status: int, headers: dict[str, str], body: bytes, limit: int) -> None:
    assert status == 413, body
    assert headers["content-type"] == "application/json"
    error = assert_error(json.loads(body), "payload-too-large")
    assert error["detail"]["limit_bytes"] == limit


def test_content_length_over_the_cap_is_413_before_the_body_is_read(merge: Merge) -> None:
    calls = merge.servicer.stats.calls
    with _nothing_lost(merge):
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", merge.port), timeout=10) as sock:
            # 10 GB announced, a few bytes sent: the answer cannot wait for the rest
            sock.sendall(_request_head(merge.port, "Content-Length: 10000000000\r\n"))
            sock.sendall(_multipart_head()[:64])
            status, headers, body = _read_response(sock)
        assert time.monotonic() - t0 < 3
        _assert_too_large(status, headers, body, MAX_BODY)
        assert "MAPSVC_UPLOAD_MAX_BYTES" in json.loads(body)["error"]["message"]
    assert merge.servicer.stats.calls == calls + 1  # only the check's own merge


def test_chunked_body_over_the_cap_is_413_while_it_is_read(merge: Merge) -> None:
    calls = merge.servicer.stats.calls
    piece = b"%" * (256 * 1024)
    chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    endless = 256 * MIB  # what the client would send if it were let
    with _nothing_lost(merge):
        with socket.create_connection(("127.0.0.1", merge.port), timeout=10) as sock:
            sock.sendall(_request_head(merge.port, "Transfer-Encoding: chunked\r\n"))
            head = _multipart_head()
            sock.sendall(f"{len(head):x}\r\n".encode() + head + b"\r\n")
            sent = len(head)
            # send until the server answers: it must do so soon after the cap, not at the end
            while sent < endless and not select.select([sock], [], [], 0)[0]:
                try:
                    sock.sendall(chunk)
                except OSError:  # the server closed its side after answering
                    break
                sent += len(piece)
            status, headers, body = _read_response(sock)
        _assert_too_large(status, headers, body, MAX_BODY)
        assert MAX_BODY < sent < endless / 4
    assert merge.servicer.stats.calls == calls + 1


def test_a_file_over_the_per_file_cap_is_413(merge: Merge) -> None:
    calls = merge.servicer.stats.calls
    big = PDF + b"%" * (MAX_FILE + 1)
    with _nothing_lost(merge):
        r = httpx.post(
            f"{merge.base}/api-user/pdf-merge",
            files=[("files", ("a.pdf", PDF)), ("files", ("big.pdf", big))],
            headers=AUTH,
            timeout=30,
        )
        assert r.status_code == 413
        error = assert_error(r.json(), "payload-too-large")
        assert error["detail"] == {"parameter": "files", "file": "big.pdf", "limit_bytes": MAX_FILE}
        assert "MAPSVC_UPLOAD_MAX_FILE_BYTES" in error["message"]
    assert merge.servicer.stats.calls == calls + 1  # the Convert server was never asked


@pytest.fixture
def huge_work_files(merge: Merge) -> Iterator[str]:
    """A folder of the work dir with two sparse 16 GiB files: one not a PDF, one a PDF."""
    rel = f"hostile-{uuid4().hex[:8]}"
    folder = merge.settings.work_dir / rel
    folder.mkdir()
    for name, head in [("junk.pdf", b"MZ\x90\x00 not a pdf"), ("huge.pdf", PDF)]:
        with (folder / name).open("wb") as file:
            file.write(head)
            file.truncate(16 * 1024 * MIB)  # sparse: reading it whole would take minutes
    yield rel
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()


@pytest.mark.anyio
async def test_a_work_dir_path_is_checked_before_it_is_read(
    merge: Merge, huge_work_files: str
) -> None:
    junk, huge = f"{huge_work_files}/junk.pdf", f"{huge_work_files}/huge.pdf"
    calls = merge.servicer.stats.calls
    with _nothing_lost(merge):
        t0 = time.monotonic()
        r = httpx.post(f"{merge.base}/api-user/pdf-merge", json=[junk], headers=AUTH, timeout=10)
        assert r.status_code == 400
        error = assert_error(r.json(), "invalid-input")
        assert error["detail"] == {"path": junk}
        assert error["message"] == f"{junk} is not a PDF"
        r = httpx.post(f"{merge.base}/api-user/pdf-merge", json=[huge], headers=AUTH, timeout=10)
        assert r.status_code == 413
        error = assert_error(r.json(), "payload-too-large")
        assert error["detail"] == {"path": huge, "limit_bytes": MAX_FILE}
        assert time.monotonic() - t0 < 3  # neither 16 GiB file was read
    assert merge.servicer.stats.calls == calls + 1  # refused by the API, before any call

    # the Convert server, asked directly, checks the same way before it reads
    t0 = time.monotonic()
    errors = []
    for path in (junk, huge):
        server, port = build_server(merge.settings, 0)
        server.start()
        try:
            async with ConvertClient(f"127.0.0.1:{port}", timeout_s=10) as client:
                request = convert_pb2.PdfMergeRequest(files=[convert_pb2.PdfSource(path=path)])
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await client.pdf_merge_message(request)
            errors.append(caught.value)
        finally:
            server.stop(None).wait(10)
    not_pdf, too_large = errors
    assert time.monotonic() - t0 < 5
    assert (not_pdf.code(), not_pdf.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        f"{junk} is not a PDF",
    )
    assert too_large.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "MAPSVC_UPLOAD_MAX_FILE_BYTES" in (too_large.details() or "")


@pytest.mark.anyio
async def test_convert_runs_ten_calls_and_refuses_past_its_queue(merge: Merge) -> None:
    """10 calls run; with no waiting place the 11th is refused at once, as "busy" (503)."""
    release, entered = threading.Event(), threading.Semaphore(0)

    def hold(index: int, name: str) -> None:
        entered.release()
        release.wait(20)

    no_queue = merge.settings.model_copy(update={"convert_max_pending": 0})
    servicer = ConvertServicer(no_queue, on_file=hold)
    server, port = build_server(no_queue, 0, servicer=servicer)
    server.start()
    address = f"127.0.0.1:{port}"
    try:
        async with ConvertClient(address, timeout_s=30) as client:
            running = [
                asyncio.create_task(client.pdf_merge([PdfFile(data=PDF)]))
                for _ in range(MAX_WORKERS)
            ]
            for _ in range(MAX_WORKERS):
                assert await asyncio.to_thread(entered.acquire, True, 10)
            t0 = time.monotonic()
            with pytest.raises(UnavailableError, match="busy") as caught:
                await client.pdf_merge([PdfFile(data=PDF)])
            assert time.monotonic() - t0 < 2
            assert caught.value.detail["grpc_status"] == "RESOURCE_EXHAUSTED"
            # the API answers 503 with the error shape while the server is full
            app = create_app(merge.settings.model_copy(update={"convert_server_address": address}))
            with admin_client(app, raise_server_exceptions=False) as tc:
                r = await asyncio.to_thread(
                    tc.post, "/api-user/pdf-merge", files=[("files", ("a.pdf", PDF))]
                )
            assert r.status_code == 503
            assert assert_error(r.json(), "unavailable")["message"].endswith(
                "busy; try again later"
            )
            release.set()
            page_counts = [result.page_count for result in await asyncio.gather(*running)]
        assert page_counts == [1] * MAX_WORKERS
    finally:
        release.set()
        server.stop(None).wait(10)
    assert (servicer.stats.calls, servicer.stats.peak) == (MAX_WORKERS, MAX_WORKERS)


@pytest.mark.anyio
async def test_convert_queues_the_eleventh_call_by_default(merge: Merge) -> None:
    release, entered = threading.Event(), threading.Semaphore(0)

    def hold(index: int, name: str) -> None:
        entered.release()
        release.wait(20)

    assert merge.settings.convert.max_pending > 0
    servicer = ConvertServicer(merge.settings, on_file=hold)
    server, port = build_server(merge.settings, 0, servicer=servicer)
    server.start()
    try:
        async with ConvertClient(f"127.0.0.1:{port}", timeout_s=30) as client:
            tasks = [
                asyncio.create_task(client.pdf_merge([PdfFile(data=PDF)]))
                for _ in range(MAX_WORKERS + 1)
            ]
            for _ in range(MAX_WORKERS):
                assert await asyncio.to_thread(entered.acquire, True, 10)
            await asyncio.sleep(0.5)
            assert servicer.stats.active == MAX_WORKERS  # the 11th waits for a worker
            assert not any(task.done() for task in tasks)
            release.set()
            page_counts = [result.page_count for result in await asyncio.gather(*tasks)]
        assert page_counts == [1] * (MAX_WORKERS + 1)
    finally:
        release.set()
        server.stop(None).wait(10)
    assert (servicer.stats.calls, servicer.stats.peak) == (MAX_WORKERS + 1, MAX_WORKERS)


def _listening(port: int) -> set[str]:
    """Local addresses of the sockets listening on ``port`` (from ``/proc/net/tcp*``)."""
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            # the kernel prints each 32-bit word in host (little-endian) order
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            ip = ipaddress.ip_address(words)
            # gRPC listens on IPv6 sockets: an IPv4-mapped address is that IPv4 address
            mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
            found.add(str(mapped or ip))
    return found


def test_convert_binds_to_loopback_unless_configured(merge: Merge) -> None:
    assert merge.settings.convert.bind == "127.0.0.1"
    # by default: loopback only; `0.0.0.0` and `::` (gRPC's dual-stack wildcard) when asked
    for bind, expected in [(None, [{"127.0.0.1"}]), ("::", [{"::"}, {"0.0.0.0", "::"}])]:
        settings = merge.settings
        if bind is not None:
            settings = settings.model_copy(update={"convert_bind": bind})
        server, port = build_server(settings, 0)
        server.start()
        try:
            assert _listening(port) in expected
        finally:
            server.stop(None).wait(10)


# -- gis-url-proxy ---------------------------------------------------------------------------


def _proxy_settings(psettings: Settings, fake_base: str, **update: str) -> Settings:
    port = fake_base.rsplit(":", 1)[1]
    return psettings.model_copy(
        update={
            "proxy_allow_hosts": "127.0.0.1",
            "proxy_trusted_addresses": f"127.0.0.1:{port}",
            **update,
        }
    )


@pytest.fixture(scope="module")
def proxy_tc(psettings: Settings, fake_base: str) -> Iterator[TestClient]:
    with app_client(_proxy_settings(psettings, fake_base)) as tc:
        yield tc


def _typed(tc: TestClient, fake_base: str, media: str, **extra: str) -> httpx.Response:
    params = {"type": media, "body": "<script>alert(document.domain)</script>", **extra}
    url = httpx.URL(f"{fake_base}/proxy/typed", params=params)
    r: httpx.Response = tc.get("/api-user/gis-url-proxy", params={"url": str(url)})
    return r


def _assert_safe_headers(r: httpx.Response) -> None:
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in r.headers["content-security-policy"]
    assert "access-control-allow-origin" not in r.headers
    assert "access-control-allow-credentials" not in r.headers


@pytest.mark.parametrize(
    "media",
    [
        "text/html",
        "text/html; charset=utf-8",
        "application/xhtml+xml",
        "application/javascript",
        "text/javascript",
        "application/octet-stream",
        "",  # no Content-Type at all
    ],
)
def test_proxy_refuses_pages_scripts_and_unknown_types(
    proxy_tc: TestClient,
    fake_base: str,
    media: str,
) -> None:
    fakes.CALLS.clear()
    r = _typed(proxy_tc, fake_base, media)
    assert r.status_code == 520
    error = assert_error(r.json(), "upstream-bad-answer")
    assert error["detail"]["content_type"].split(";")[0] == media.split(";")[0]
    assert "MAPSVC_PROXY_CONTENT_TYPES" in error["message"]
    assert "<script>" not in r.text
    _assert_safe_headers(r)
    assert len(fakes.CALLS["proxy"]) == 1
    assert proxy_tc.get("/api-user/health").json() == HEALTHY


def test_proxy_never_relays_html_whatever_the_setting(
    psettings: Settings,
    fake_base: str,
) -> None:
    wide = _proxy_settings(psettings, fake_base, proxy_content_types="text/*,application/*")
    with app_client(wide) as tc:
        assert _typed(tc, fake_base, "text/csv").status_code == 200  # the setting is used
        for media in ("text/html", "application/javascript", "application/xhtml+xml"):
            r = _typed(tc, fake_base, media)
            assert r.status_code == 520, media
            _assert_safe_headers(r)


@pytest.mark.parametrize(
    "media",
    [
        "image/png",
        "image/svg+xml",
        "application/json",
        "application/geo+json",
        "application/vnd.mapbox-vector-tile",
        "application/x-protobuf",
        "application/vnd.ogc.wms_xml",
        "text/xml; charset=utf-8",
        "text/plain",
    ],
)
def test_proxy_relays_allowed_types_without_sniffing_or_cors(
    proxy_tc: TestClient,
    fake_base: str,
    media: str,
) -> None:
    r = _typed(proxy_tc, fake_base, media, body="tile bytes")
    if media == "application/vnd.ogc.wms_xml":  # not on the default list
        assert r.status_code == 520
        _assert_safe_headers(r)
        return
    assert r.status_code == 200, r.text
    assert r.content == b"tile bytes"
    assert r.headers["content-type"].startswith(media.split(";")[0])
    _assert_safe_headers(r)  # the target's own CORS headers are dropped too


def test_proxy_passes_bodyless_answers_and_marks_its_errors(
    proxy_tc: TestClient,
    fake_base: str,
) -> None:
    r = _typed(proxy_tc, fake_base, "", body="", status="304")
    assert r.status_code == 304
    _assert_safe_headers(r)
    r = proxy_tc.get("/api-user/gis-url-proxy", params={"url": "http://10.0.0.1/"})
    assert r.status_code == 403
    assert_error(r.json(), "forbidden")
    _assert_safe_headers(r)
    r = proxy_tc.get("/api-user/gis-url-proxy")
    assert r.status_code == 400
    _assert_safe_headers(r)


def test_proxy_cors_only_for_the_configured_origins(
    psettings: Settings,
    fake_base: str,
) -> None:
    origin = "https://map.example.org"
    configured = _proxy_settings(
        psettings, fake_base, proxy_cors_origins=f"{origin}, https://other.example.org"
    )
    url = {"url": f"{fake_base}/proxy/typed?type=image/png&body=png"}
    with app_client(configured) as tc:
        r = tc.get("/api-user/gis-url-proxy", params=url, headers={"Origin": origin})
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == origin
        assert "origin" in r.headers["vary"].lower()
        assert "access-control-allow-credentials" not in r.headers
        assert r.headers["x-content-type-options"] == "nosniff"
        r = tc.get(
            "/api-user/gis-url-proxy", params=url, headers={"Origin": "https://evil.example"}
        )
        assert r.status_code == 200
        assert "access-control-allow-origin" not in r.headers
        r = tc.get("/api-user/gis-url-proxy", params=url)
        assert "access-control-allow-origin" not in r.headers
        # an error answer follows the same rule
        r = tc.get(
            "/api-user/gis-url-proxy",
            params={"url": "http://10.0.0.1/"},
            headers={"Origin": origin},
        )
        assert r.status_code == 403
        assert r.headers["access-control-allow-origin"] == origin
        # other endpoints are not touched by the proxy's CORS: they follow the API's own
        # (MAPSVC_CORS_ORIGINS, any origin by default), never echo the proxy's list
        r = tc.get("/api-user/health", headers={"Origin": origin})
        assert r.json() == HEALTHY
        assert r.headers["access-control-allow-origin"] == "*"
    with app_client(_proxy_settings(psettings, fake_base, proxy_cors_origins="*")) as tc:
        r = tc.get("/api-user/gis-url-proxy", params=url, headers={"Origin": "https://any.org"})
        assert r.headers["access-control-allow-origin"] == "*"
