"""The Convert gRPC server through the real async client: merging, errors, limits, workers."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path

import grpc
import pytest
from pydantic import SecretStr

from shared.convert._pb import convert_pb2
from shared.convert.client import ConvertClient, PdfFile, message_to_dict
from shared.convert.wire import MAX_WORKERS
from shared.errors import InvalidInputError, NotFoundError, UnavailableError
from shared.settings import Settings
from tests.convert.conftest import StartServer
from tests.convert.pdfs import encrypted_pdf, info_of, make_pdf, pages_of

pytestmark = pytest.mark.anyio

A = make_pdf([(100, 200, "a1"), (110, 210, "a2")])
B = make_pdf([(300, 400, "b1")])
C = make_pdf([(500, 600, "c1"), (510, 610, "c2"), (520, 620, "c3")])


async def _status_of(address: str, request: convert_pb2.PdfMergeRequest) -> grpc.aio.AioRpcError:
    async with ConvertClient(address) as client:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await client.pdf_merge_message(request)
    return caught.value


async def test_merge_keeps_the_order_and_counts_pages(
    convert_settings: Settings, start_server: StartServer
) -> None:
    server = start_server(convert_settings)
    (convert_settings.work_dir / "docs").mkdir()
    (convert_settings.work_dir / "docs" / "c.pdf").write_bytes(C)
    async with ConvertClient(server.address) as client:
        result = await client.pdf_merge(
            [PdfFile("b.pdf", data=B), PdfFile(path="docs/c.pdf"), PdfFile("a.pdf", data=A)],
            output_name="all.pdf",
            metadata={"Title": "Merged", "/Author": "mapsvc tests"},
            request_id="req-1",
        )
    assert result.page_count == 6
    assert result.byte_size == len(result.pdf)
    assert result.output_name == "all.pdf"
    assert [(w, h) for w, h, _ in pages_of(result.pdf)] == [
        (300, 400),
        (500, 600),
        (510, 610),
        (520, 620),
        (100, 200),
        (110, 210),
    ]
    assert [text for _, _, text in pages_of(result.pdf)] == ["b1", "c1", "c2", "c3", "a1", "a2"]
    info = info_of(result.pdf)
    assert info["/Title"] == "Merged"
    assert info["/Author"] == "mapsvc tests"
    assert server.servicer.stats.calls == 1


async def test_the_default_output_name_and_the_request_id_in_the_server_log(
    convert_settings: Settings, start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    server = start_server(convert_settings)
    with caplog.at_level(logging.INFO, logger="mapsvc.convert"):
        async with ConvertClient(server.address) as client:
            result = await client.pdf_merge([PdfFile(data=A)], request_id="rid-42")
        assert result.output_name == "merged.pdf"
    assert "pdfMerge rid-42: 1 files, 2 pages" in caplog.text


async def test_messages_as_dicts_follow_the_spec_loader_options(
    convert_settings: Settings, start_server: StartServer
) -> None:
    server = start_server(convert_settings)
    async with ConvertClient(server.address) as client:
        response = await client.pdf_merge_message(
            convert_pb2.PdfMergeRequest(files=[convert_pb2.PdfSource(data=B)])
        )
    as_dict = message_to_dict(response)
    # field names as written, int64 as a string, every field present
    assert set(as_dict) == {"pdf", "page_count", "byte_size", "output_name"}
    assert as_dict["page_count"] == 1
    assert isinstance(as_dict["byte_size"], str)
    assert int(as_dict["byte_size"]) > 0
    assert message_to_dict(convert_pb2.PdfMergeResponse()) == {
        "pdf": "",
        "page_count": 0,
        "byte_size": "0",
        "output_name": "",
    }
    # the oneof is reported by the name of the field that is set
    request = convert_pb2.PdfMergeRequest(
        files=[convert_pb2.PdfSource(path="x.pdf"), convert_pb2.PdfSource(data=b"%PDF-")],
        metadata={"Title": "t"},
    )
    files = message_to_dict(request)["files"]
    assert files[0] == {"path": "x.pdf", "name": "", "source": "path"}
    assert files[1]["source"] == "data"
    assert message_to_dict(request)["output_name"] == ""
    assert message_to_dict(request)["metadata"] == {"Title": "t"}


async def test_a_corrupt_pdf_is_invalid_argument_naming_the_file(
    convert_settings: Settings, start_server: StartServer
) -> None:
    server = start_server(convert_settings)
    broken = A[: len(A) // 2]
    request = convert_pb2.PdfMergeRequest(
        files=[
            convert_pb2.PdfSource(name="good.pdf", data=A),
            convert_pb2.PdfSource(name="broken.pdf", data=broken),
        ]
    )
    error = await _status_of(server.address, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "broken.pdf" in (error.details() or "")
    assert "not a readable PDF" in (error.details() or "")
    async with ConvertClient(server.address) as client:
        with pytest.raises(InvalidInputError, match="junk.bin is not a PDF") as caught:
            await client.pdf_merge([PdfFile("junk.bin", data=b"GIF89a not a pdf")])
    assert caught.value.detail["grpc_status"] == "INVALID_ARGUMENT"
    # unnamed files are named by their place
    async with ConvertClient(server.address) as client:
        with pytest.raises(InvalidInputError, match="file 2 is not a readable PDF"):
            await client.pdf_merge([PdfFile(data=A), PdfFile(data=b"%PDF-1.7 rubbish")])


async def test_an_encrypted_pdf_is_refused_one_with_an_owner_password_only_is_taken(
    convert_settings: Settings, start_server: StartServer
) -> None:
    server = start_server(convert_settings)
    request = convert_pb2.PdfMergeRequest(
        files=[convert_pb2.PdfSource(name="locked.pdf", data=encrypted_pdf("s3cret"))]
    )
    error = await _status_of(server.address, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "locked.pdf is encrypted" in (error.details() or "")
    async with ConvertClient(server.address) as client:
        result = await client.pdf_merge([PdfFile(data=encrypted_pdf("")), PdfFile(data=B)])
    assert result.page_count == 2


async def test_paths_stay_inside_the_work_dir(
    convert_settings: Settings, start_server: StartServer, tmp_path: Path
) -> None:
    server = start_server(convert_settings)
    outside = tmp_path / "outside.pdf"
    outside.write_bytes(A)
    (convert_settings.work_dir / "link.pdf").symlink_to(outside)
    (convert_settings.work_dir / "folder").mkdir()
    for path, code, words in [
        ("../outside.pdf", grpc.StatusCode.INVALID_ARGUMENT, "without '..'"),
        (str(outside), grpc.StatusCode.INVALID_ARGUMENT, "without '..'"),
        ("link.pdf", grpc.StatusCode.INVALID_ARGUMENT, "leads outside the work dir"),
        ("folder", grpc.StatusCode.INVALID_ARGUMENT, "is not a file"),
        ("missing.pdf", grpc.StatusCode.NOT_FOUND, "no file 'missing.pdf'"),
    ]:
        request = convert_pb2.PdfMergeRequest(files=[convert_pb2.PdfSource(path=path)])
        error = await _status_of(server.address, request)
        assert error.code() == code, path
        assert words in (error.details() or ""), (path, error.details())
    async with ConvertClient(server.address) as client:
        with pytest.raises(NotFoundError):
            await client.pdf_merge([PdfFile(path="missing.pdf")])


async def test_an_empty_request_is_invalid(
    convert_settings: Settings, start_server: StartServer
) -> None:
    server = start_server(convert_settings)
    error = await _status_of(server.address, convert_pb2.PdfMergeRequest())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    request = convert_pb2.PdfMergeRequest(files=[convert_pb2.PdfSource(name="x")])
    error = await _status_of(server.address, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "neither data nor path" in (error.details() or "")


async def test_a_call_cancelled_by_the_client_stops_on_the_server(
    convert_settings: Settings, start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    started = threading.Event()
    reached: list[int] = []

    def slow(index: int, name: str) -> None:
        reached.append(index)
        started.set()
        time.sleep(0.05)

    server = start_server(convert_settings, on_file=slow)
    files = [PdfFile(f"f{i}.pdf", data=B) for i in range(60)]  # 3 s if it ran to the end
    with caplog.at_level(logging.INFO, logger="mapsvc.convert"):
        async with ConvertClient(server.address) as client:
            task = asyncio.create_task(client.pdf_merge(files))
            assert await asyncio.to_thread(started.wait, 5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        deadline = time.monotonic() + 5
        while server.servicer.stats.cancelled == 0 or server.servicer.stats.active:
            assert time.monotonic() < deadline, "the server did not see the cancellation"
            await asyncio.sleep(0.02)
    assert server.servicer.stats.cancelled == 1
    assert len(reached) < len(files)
    assert "cancelled after" in caplog.text


async def test_the_message_size_limit(
    convert_settings: Settings, start_server: StartServer, tmp_path: Path
) -> None:
    limit = 64 * 1024
    small = convert_settings.model_copy(update={"convert_max_message_bytes": limit})
    server = start_server(small)
    big_input = make_pdf([(100, 100, "big")], pad=100_000)
    assert len(big_input) > limit
    # the server refuses a request over its limit
    request = convert_pb2.PdfMergeRequest(files=[convert_pb2.PdfSource(data=big_input)])
    error = await _status_of(server.address, request)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # a client with the lowered limit refuses to send it
    async with ConvertClient(server.address, max_message_bytes=limit) as client:
        with pytest.raises(InvalidInputError, match="too large") as caught:
            await client.pdf_merge([PdfFile(data=big_input)])
        assert caught.value.detail["grpc_status"] == "RESOURCE_EXHAUSTED"
    # a small request whose merged PDF would be over the limit
    (small.work_dir / "big.pdf").write_bytes(big_input)
    request = convert_pb2.PdfMergeRequest(files=[convert_pb2.PdfSource(path="big.pdf")])
    error = await _status_of(server.address, request)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than the message limit" in (error.details() or "")
    # and under the limit all is well
    async with ConvertClient(server.address, max_message_bytes=limit) as client:
        assert (await client.pdf_merge([PdfFile(data=A)])).page_count == 2


async def test_at_most_ten_calls_run_together_and_all_finish(
    convert_settings: Settings, start_server: StartServer
) -> None:
    server = start_server(convert_settings, on_file=lambda index, name: time.sleep(0.1))
    calls = 25
    async with ConvertClient(server.address) as client:
        results = await asyncio.gather(
            *(client.pdf_merge([PdfFile(data=B), PdfFile(data=A)]) for _ in range(calls))
        )
    assert [r.page_count for r in results] == [3] * calls
    stats = server.servicer.stats
    assert stats.calls == calls
    assert stats.peak == MAX_WORKERS == 10


async def test_the_access_token_is_checked(
    convert_settings: Settings, start_server: StartServer
) -> None:
    guarded = convert_settings.model_copy(update={"convert_token": SecretStr("t0ken")})
    server = start_server(guarded)
    request = convert_pb2.PdfMergeRequest(files=[convert_pb2.PdfSource(data=B)])
    error = await _status_of(server.address, request)
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    async with ConvertClient(server.address, token="wrong") as client:
        with pytest.raises(UnavailableError, match="refused the access token") as caught:
            await client.pdf_merge([PdfFile(data=B)])
        assert caught.value.detail["grpc_status"] == "UNAUTHENTICATED"
    async with ConvertClient(server.address, token="t0ken") as client:
        assert (await client.pdf_merge([PdfFile(data=B)])).page_count == 1
    assert server.servicer.stats.calls == 1  # refused calls never ran


async def test_a_stopping_server_lets_the_call_in_flight_finish(
    convert_settings: Settings, start_server: StartServer
) -> None:
    started, release = threading.Event(), threading.Event()

    def hold(index: int, name: str) -> None:
        started.set()
        release.wait(5)

    server = start_server(convert_settings, on_file=hold)
    async with ConvertClient(server.address) as client:
        task = asyncio.create_task(client.pdf_merge([PdfFile(data=A)]))
        assert await asyncio.to_thread(started.wait, 5)
        stopped = server.server.stop(5)  # what SIGTERM does (with a longer grace)
        with pytest.raises(UnavailableError):
            await client.pdf_merge([PdfFile(data=B)])
        release.set()
        assert (await task).page_count == 2
        assert await asyncio.to_thread(stopped.wait, 5)
