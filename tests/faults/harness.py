"""The fault tests' processes of the service (the API, Celery workers) and the checks of what a
fault must not leave behind; their Redis and PostgreSQL are ``tests.services``'."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import redis

from shared.seeding.plan import chunks
from shared.settings import Settings
from tests.checks import AUTH
from tests.jobs import job_lines
from tests.layers import decode
from tests.services import tail

__all__ = [
    "ServiceProcess",
    "api_answers",
    "assert_png",
    "cached_tiles",
    "job_line_matches",
    "planned_tiles",
]


class ServiceProcess:
    """A process of the service (the API, a worker) with its output in a log file.

    It leads a process group of its own: should it not stop, it is killed with its children
    (a worker's pool processes, the API's render processes).
    """

    def __init__(
        self, name: str, argv: Sequence[str], env: dict[str, str], log: Path, cwd: Path
    ) -> None:
        self.name = name
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                list(argv),
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        """The process id (a worker's: Celery's main process)."""
        return self.proc.pid

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.proc.poll() is None

    def output(self) -> str:
        """What the process wrote so far."""
        return self.log.read_text(errors="replace")

    def tail(self) -> str:
        """The end of its output, for failure messages."""
        return f"--- {self.name} log ---\n{tail(self.log)}"

    def wait_for(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        """Wait until ``check()``; fail with the log when the process ends or time is up."""
        deadline = time.monotonic() + timeout
        while not check():
            assert self.alive(), f"{self.name} exited: {what}\n{self.tail()}"
            assert time.monotonic() < deadline, f"{what}: not in {timeout} s\n{self.tail()}"
            time.sleep(0.1)

    def signal(self, signum: signal.Signals) -> None:
        """Send ``signum`` to the process."""
        self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        """Its exit status, once it has exited."""
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM, then SIGKILL to its process group if it does not exit in ``timeout`` s."""
        if not self.alive():
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its group: it and its children only
            self.proc.wait(timeout=10)


def api_answers(base: str, path: str) -> Callable[[], bool]:
    """A check: ``path`` of the API at ``base`` answers 200."""

    def check() -> bool:
        try:
            return httpx.get(f"{base}{path}", headers=AUTH, timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    return check


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(data: bytes, where: str, size: int = 256) -> None:
    """``data`` is a whole PNG: every chunk's CRC right, ``IEND`` last, pixels decodable."""
    assert data.startswith(_PNG_SIGNATURE), f"{where}: not a PNG"
    pos, kinds = len(_PNG_SIGNATURE), []
    while pos < len(data):
        assert pos + 12 <= len(data), f"{where}: truncated chunk header at {pos}"
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        assert pos + 12 + length <= len(data), f"{where}: truncated {kind!r}"
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"{where}: bad CRC of {kind!r}"
        kinds.append(kind)
        pos += 12 + length
    assert (kinds[0], kinds[-1]) == (b"IHDR", b"IEND"), f"{where}: chunks {kinds}"
    pixels = decode(data)
    assert pixels.shape[1:] == (size, size), f"{where}: {pixels.shape}"


def cached_tiles(settings: Settings, style: str) -> set[tuple[int, int, int]]:
    """The ``(z, x, y)`` of the style's PNG tiles in the file cache (language ``en``), each
    checked whole (:func:`assert_png`); no file may be left under a temporary name."""
    root = settings.dirs.rtile / style / "en"
    found = set()
    for path in sorted(root.rglob("*")):
        if path.is_dir():
            continue
        rel = path.relative_to(root)
        assert not path.name.startswith("."), f"left behind: {rel}"
        assert path.suffix == ".png", f"not a tile: {rel}"
        assert_png(path.read_bytes(), str(rel))
        z, x, y = (int(part) for part in rel.with_suffix("").parts)
        found.add((z, x, y))
    return found


def planned_tiles(plan: dict[str, Any], bounds: list[float]) -> set[tuple[int, int, int]]:
    """The tiles of a pre-tiling plan (the dry run's answer) over the layer's footprint."""
    return {(t.z, t.x, t.y) for chunk in chunks(bounds, plan) for t in chunk.tiles()}


def job_line_matches(rdb: redis.Redis, job_id: str, match: Callable[[str], bool]) -> bool:
    """Whether a line of the job's stream matches."""
    return any(match(line) for line in job_lines(rdb, job_id))
