"""``mapsvc convert-server [port]`` as a process: serves, then stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from shared.convert.client import ConvertClient, PdfFile
from shared.settings import Settings
from tests.conftest import free_port, mapsvc_process
from tests.convert.pdfs import make_pdf, pages_of


@pytest.mark.anyio
async def test_convert_server_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    settings = Settings(work_dir=tmp_path, convert_port=1, _env_file=None)  # type: ignore[call-arg]
    port = free_port()  # the argument wins over MAPSVC_CONVERT_PORT
    log = tmp_path / "convert.log"
    pdf = make_pdf([(120, 80, "one")])
    with mapsvc_process(settings, "convert-server", str(port), log=log, stop_timeout=15) as proc:
        deadline = time.monotonic() + 20
        async with ConvertClient(f"127.0.0.1:{port}", timeout_s=5) as client:
            while "listening" not in log.read_text():
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                await asyncio.sleep(0.05)
            result = await client.pdf_merge([PdfFile(data=pdf), PdfFile(data=pdf)])
        assert pages_of(result.pdf) == [(120, 80, "one")] * 2
        assert f"listening on 127.0.0.1:{port}" in log.read_text()  # loopback by default
    assert proc.returncode == 0, log.read_text()  # it stopped on SIGTERM, and cleanly
    assert "convert server stopped" in log.read_text()
