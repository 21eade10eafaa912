"""Services of their own for the fault tests (Redis with AOF, a PostgreSQL cluster, the API and
Celery workers as processes) and the checks of what a fault must not leave behind."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis

from shared.settings import Settings
from shared.tiles.pretile import chunks
from tests.checks import AUTH
from tests.jobs import job_lines
from tests.layers import decode

__all__ = [
    "PG_BIN",
    "PostgresCluster",
    "RedisServer",
    "ServiceProcess",
    "api_answers",
    "assert_png",
    "cached_tiles",
    "job_line_matches",
    "planned_tiles",
    "poll",
    "spare_port",
]

#: the newest PostgreSQL server installed (Debian's layout; PostGIS is installed for it)
PG_BIN = max(
    Path("/usr/lib/postgresql").glob("*/bin/initdb"),
    key=lambda initdb: int(initdb.parent.parent.name),
    default=Path("/usr/lib/postgresql/15/bin/initdb"),
).parent
#: the ports a service of its own listens on: below the kernel's ephemeral range, so that no
#: client connection takes the port of a service while it is down for a restart
_PORTS = (20000, 30000)


def spare_port() -> int:
    """A free TCP port on loopback, outside the ephemeral range (see ``_PORTS``)."""
    for _ in range(200):
        port = random.randint(*_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


def poll(check: Callable[[], bool], timeout: float, what: str, step: float = 0.05) -> None:
    """Wait until ``check()`` is true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(step)


def _tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


class RedisServer:
    """A ``redis-server`` of its own: AOF fsynced every second, in a folder of its own.

    Stopped and started again on the same port and folder, it reads its AOF back.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = spare_port()
        self.log = folder / "redis.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        """The URL of database ``db``."""
        return f"redis://127.0.0.1:{self.port}/{db}"

    def client(self) -> redis.Redis:
        """A client that gives up at once when the server is down (no retries)."""
        return redis.Redis(port=self.port, socket_timeout=2, retry=None, decode_responses=True)

    def answers(self) -> bool:
        """Whether the server answers PING."""
        try:
            with self.client() as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def start(self) -> None:
        """Start the server (reading its AOF, if any) and wait until it answers."""
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--dir", str(self.folder), "--appendonly", "yes", "--appendfsync", "everysec"]
        argv += ["--save", "", "--maxmemory-policy", "noeviction", "--logfile", str(self.log)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"redis-server did not start:\n{_tail(self.log)}")
            time.sleep(0.02)

    def stop(self) -> None:
        """``SHUTDOWN NOSAVE``: no RDB snapshot; the AOF is flushed and closed."""
        if self.proc is None:
            return
        try:
            with self.client() as client:
                client.shutdown(nosave=True)
        except redis.ConnectionError:
            pass  # it closed the connection as it went
        self.proc.wait(timeout=20)
        self.proc = None

    def close(self) -> None:
        """Stop the server, killing it if it does not stop."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.stop()
            except (redis.RedisError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


class PostgresCluster:
    """A PostgreSQL cluster of its own (initdb, pg_ctl), trust authentication, on loopback.

    As root, it is run as the ``postgres`` user (PostgreSQL refuses root), in a folder of
    ``/tmp`` that user owns (the folders of pytest's temporary paths are root's only).
    """

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="mapsvc-faults-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = spare_port()
        self._as_postgres: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            self._as_postgres = ["runuser", "-u", "postgres", "--"]

    def _run(self, *argv: str) -> None:
        done = subprocess.run(
            [*self._as_postgres, *argv], capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv[:2])} failed:\n{done.stdout}{done.stderr}\n{_tail(self.log)}"
            )

    def url(self, db: str = "postgres") -> str:
        """The libpq URL of database ``db``."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def init(self) -> None:
        """Make the cluster (trust authentication, user ``postgres``)."""
        self._run(
            str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
            "-E", "UTF8", "--no-sync", "--no-instructions",
        )  # fmt: skip

    def start(self) -> None:
        """Start the server and wait until it takes connections."""
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
            "-o", options, "start",
        )  # fmt: skip

    def stop(self) -> None:
        """Stop the server (``fast``: sessions are ended, nothing new is taken)."""
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def answers(self) -> bool:
        """Whether the server takes a connection."""
        try:
            with psycopg.connect(self.url(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def close(self) -> None:
        """Stop the server if it runs, and remove the cluster."""
        if (self.data / "postmaster.pid").exists():
            subprocess.run(
                [*self._as_postgres, str(PG_BIN / "pg_ctl"), "-D", str(self.data)]
                + ["-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=60,
                check=False,
            )
        shutil.rmtree(self.root, ignore_errors=True)


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
        return f"--- {self.name} log ---\n{_tail(self.log)}"

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
