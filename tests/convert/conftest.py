"""A real Convert gRPC server in the test process, on a free loopback port."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from shared.convert.server import ConvertServicer, build_server
from shared.settings import Settings


@dataclass
class RunningServer:
    address: str
    servicer: ConvertServicer
    server: grpc.Server


StartServer = Callable[..., RunningServer]


@pytest.fixture
def convert_settings(tmp_path: Path) -> Settings:
    """Settings of a Convert server with a work dir of its own."""
    work = tmp_path / "work"
    work.mkdir()
    return Settings(
        work_dir=work,
        convert_server_address=None,
        convert_token=None,
        convert_max_message_bytes=536870912,
        _env_file=None,  # type: ignore[call-arg]
    )


@pytest.fixture
def start_server() -> Iterator[StartServer]:
    """Start Convert servers (``start(settings, on_file=None)``); all stop at the end."""
    running: list[RunningServer] = []

    def start(
        settings: Settings, on_file: Callable[[int, str], None] | None = None
    ) -> RunningServer:
        servicer = ConvertServicer(settings, on_file=on_file)
        server, port = build_server(settings, 0, host="127.0.0.1", servicer=servicer)
        server.start()
        running.append(RunningServer(f"127.0.0.1:{port}", servicer, server))
        return running[-1]

    yield start
    for item in running:
        item.server.stop(None).wait(10)
