"""Services of a test's or a script's own, stopped and started at will: a Redis (AOF) and a
PostgreSQL cluster on ports and in folders of their own, never the machine's shared ones (the
fault tests, ``tests/bench/bench_hosts.py``)."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psycopg
import redis

__all__ = ["PG_BIN", "PostgresCluster", "RedisServer", "poll", "spare_port", "tail"]

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


def tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


class RedisServer:
    """A ``redis-server`` of its own: AOF fsynced every second, in a folder of its own.

    Stopped and started again on the same port and folder, it reads its AOF back.
    """

    def __init__(self, folder: Path, binds: Sequence[str] = ("127.0.0.1",)) -> None:
        self.folder = folder
        self.binds = tuple(binds)
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
        argv = ["redis-server", "--port", str(self.port), "--bind", *self.binds]
        argv += ["--protected-mode", "no"]  # it listens on the addresses it is given only
        argv += ["--dir", str(self.folder), "--appendonly", "yes", "--appendfsync", "everysec"]
        argv += ["--save", "", "--maxmemory-policy", "noeviction", "--logfile", str(self.log)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"redis-server did not start:\n{tail(self.log)}")
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
    """A PostgreSQL cluster of its own (initdb, pg_ctl), trust authentication.

    It listens on ``listen`` (loopback by default) and trusts loopback and the networks of
    ``clients`` (CIDRs). As root, it is run as the ``postgres`` user (PostgreSQL refuses root),
    in a folder of ``/tmp`` that user owns (the folders of pytest's temporary paths are root's).
    """

    def __init__(self, listen: Sequence[str] = ("127.0.0.1",), clients: Sequence[str] = ()) -> None:
        self.listen = tuple(listen)
        self.clients = tuple(clients)
        self.root = Path(tempfile.mkdtemp(prefix="mapsvc-pg-"))
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
                f"{' '.join(argv[:2])} failed:\n{done.stdout}{done.stderr}\n{tail(self.log)}"
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
        if self.clients:
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.writelines(f"host all all {net} trust\n" for net in self.clients)

    def start(self) -> None:
        """Start the server and wait until it takes connections."""
        listen = ",".join(self.listen)
        options = f"-p {self.port} -k {self.root} -c listen_addresses={listen} -c fsync=off"
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
