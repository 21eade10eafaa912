"""What the benchmark scripts share: a deadline, the servers they start and wait for, a client,
the admin key they call the service with, the settings of the service, and the databases they
make."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg

from shared.jobs import JobReporter, JobStore
from shared.raster.paths import encode_id
from shared.redis_clients import sync_client
from shared.settings import Settings
from tests.layers import configure_in_process

__all__ = [
    "PG_SERVER",
    "add_pg_argument",
    "Deadline",
    "HttpConnection",
    "Server",
    "admin_key",
    "auth_headers",
    "auth_lines",
    "check_flushable",
    "check_loopback",
    "configure_scene",
    "drop_database",
    "free_port",
    "fresh_database",
    "goal",
    "load_average",
    "service_env",
    "service_settings",
    "sqlalchemy_url",
    "start",
    "summary_line",
    "WrkCase",
    "WrkResult",
    "wait_http",
    "wrk_rate",
]


# --- credentials -------------------------------------------------------------------------------


def admin_key() -> str:
    """A random key for one run: the service is started with it as ``MAPSVC_ADMIN_API_KEY``."""
    return f"bench-{secrets.token_urlsafe(24)}"


def auth_headers(key: str) -> dict[str, str]:
    """The header that sends ``key`` (for httpx)."""
    return {"Authorization": f"Bearer {key}"}


def auth_lines(key: str) -> str:
    """The same header as a line of a hand-written HTTP/1.1 request."""
    return "".join(f"{name}: {value}\r\n" for name, value in auth_headers(key).items())


def service_env(key: str) -> dict[str, str]:
    """The ``MAPSVC_*`` settings of a service a script starts: ``key`` as its admin key, and
    quotas no script reaches (a benchmark is one caller asking far more than a user would)."""
    unlimited = str(10**9)
    return {
        "MAPSVC_ADMIN_API_KEY": key,
        "MAPSVC_RATE_TILES_PER_MIN": unlimited,
        "MAPSVC_RATE_DATA_PER_MIN": unlimited,
        "MAPSVC_RATE_PROVIDERS_PER_MIN": unlimited,
        "MAPSVC_RATE_JOBS_PER_MIN": unlimited,
        "MAPSVC_RATE_DOCUMENTS_PER_MIN": unlimited,
        "MAPSVC_RATE_AUTH_PER_MIN": unlimited,
        "MAPSVC_RATE_ADMIN_PER_MIN": unlimited,
        "MAPSVC_FRONT_RATE_PER_S": "0",
    }


def service_settings(key: str, work: Path, **env: str) -> tuple[dict[str, str], Settings]:
    """The environment of a service a script starts (this process's, ``service_env(key)``, the
    work dir ``work``, a free port, then ``env``) and the settings it makes; the work dir made."""
    full = {
        **os.environ,
        **service_env(key),
        "MAPSVC_WORK_DIR": str(work),
        "MAPSVC_PORT": str(free_port()),
        **env,
    }
    settings = Settings(
        **{k.removeprefix("MAPSVC_").lower(): v for k, v in full.items() if k.startswith("MAPSVC_")}
    )
    settings.ensure_work_dir()
    return full, settings


def configure_scene(settings: Settings, source: Path, rel: str) -> str:
    """``source`` copied to ``rel`` of the raster folder and configured as a layer (in-process,
    as the job does): its id."""
    target = settings.dirs.raster / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, target)
    store = JobStore(sync_client(settings.redis_url), settings)
    job = str(uuid.uuid4())
    store.create(job, "bench", {})
    reporter = JobReporter(store, job)
    configure_in_process(settings, rel, reporter)
    return encode_id(rel)


class Deadline:
    """The time left for the whole run; every wait asks it."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self, at_most: float | None = None) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError("the benchmark ran out of time (--timeout-s)")
        return left if at_most is None else min(left, at_most)


@dataclass
class Server:
    """A process this script started, in a process group of its own, with its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def check(self) -> None:
        if self.popen.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with code {self.popen.returncode}; its log ends:\n"
                + self.tail()
            )

    def tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM to the process group (uvicorn and its workers), then SIGKILL to what is left."""
        for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.popen.wait(timeout=wait_s)
                return
            except subprocess.TimeoutExpired:
                pass


def start(
    stack: ExitStack,
    name: str,
    argv: Sequence[str],
    log: Path,
    env: dict[str, str],
    cwd: Path,
    *,
    own_session: bool = True,
) -> Server:
    """``argv`` started in a process group of its own, stopped when ``stack`` closes.

    ``own_session``: in a session of its own too, as a service manager starts it (a scheduling
    group of its own under Linux's autogroup); else in this script's, as ``mapsvc up`` starts
    the API and the worker.
    """
    with log.open("wb") as out:
        popen = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=own_session,
            process_group=None if own_session else 0,
        )
    server = Server(name, popen, log)
    stack.callback(server.stop)
    return server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(
    client: httpx.Client,
    url: str,
    servers: Sequence[Server],
    deadline: Deadline,
    limit_s: float,
    ok: Sequence[int] = (200,),
) -> httpx.Response:
    """The first answer of ``url`` with a status in ``ok``; fails early when a server died."""
    end = time.monotonic() + deadline.left(limit_s)
    last = "no answer"
    while time.monotonic() < end:
        for server in servers:
            server.check()
        try:
            response = client.get(url, timeout=10)
            if response.status_code in ok:
                return response
            last = f"{response.status_code} {response.text[:300]}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer {list(ok)} within {limit_s:.0f} s: {last}")


# --- goals: each printed, and gathered for the summary of `make bench` ------------------------

#: a file every script appends its goal lines to (``make bench`` prints it at the end)
SUMMARY_ENV = "MAPSVC_BENCH_SUMMARY"


def goal(what: str, ratio: float, target: float, unit: str, *, at_most: bool = False) -> bool:
    """Print a ratio against its goal (``>= target``, or ``<= target`` when ``at_most``) and add
    the line to the run's summary; whether the goal is met."""
    met = ratio <= target if at_most else ratio >= target
    sign = "<=" if at_most else ">="
    line = (
        f"{what:58} {ratio:8.2f} {unit:14} goal {sign} {target:<5g} {'met' if met else 'NOT met'}"
    )
    summary_line(line)
    return met


def summary_line(line: str) -> None:
    """Print ``line`` and add it to the run's summary (a figure shown beside the goals)."""
    print(line)
    summary = os.environ.get(SUMMARY_ENV)
    if summary:
        with open(summary, "a", encoding="utf-8") as out:
            out.write(line + "\n")


# --- wrk: the load generator of every HTTP throughput figure ---------------------------------

_WRK_LUA = """
local urls = {}
for line in io.lines(os.getenv("URLS")) do urls[#urls + 1] = line end
local i = 0
local headers = {}
for name, value in string.gmatch(os.getenv("HEADERS") or "", "([^:\\n]+): ([^\\n]*)") do
  headers[name] = value
end
request = function()
  i = i % #urls + 1
  return wrk.format("GET", urls[i], headers)
end
"""


@dataclass(frozen=True)
class WrkResult:
    """What one ``wrk`` run measured."""

    rate: float  # requests per second
    p50_ms: float
    p99_ms: float


@dataclass
class WrkCase:
    """The passes of one measured case: its rate is the median pass's, its latencies the
    medians of the passes'."""

    name: str
    passes: list[WrkResult] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return statistics.median(p.rate for p in self.passes)

    def latency(self) -> tuple[float, float]:
        """p50 and p99 (ms): the medians of each pass's."""
        return (
            statistics.median(p.p50_ms for p in self.passes),
            statistics.median(p.p99_ms for p in self.passes),
        )


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def wrk_output(
    base: str,
    paths: Sequence[str],
    *,
    headers: dict[str, str] | None = None,
    seconds: int = 10,
    connections: int = 8,
    threads: int = 2,
    timeout_s: float | None = None,
) -> str:
    """What ``wrk --latency`` prints driving ``base``, cycling through ``paths`` (each
    connection asks the next); ``timeout_s``: its timeout of an answer (wrk's own: 2 s).

    A C client, so that the client is not the limit (a Python client saturates a core before a
    server on two does).
    """
    with tempfile.TemporaryDirectory(prefix="wrk-") as tmp:
        urls, lua = Path(tmp) / "urls.txt", Path(tmp) / "cycle.lua"
        urls.write_text("\n".join(paths) + "\n")
        lua.write_text(_WRK_LUA)
        lines = "\n".join(f"{k}: {v}" for k, v in (headers or {}).items())
        argv = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency"]
        if timeout_s is not None:
            argv.append(f"--timeout={timeout_s:g}s")
        done = subprocess.run(
            [*argv, "-s", str(lua), base],
            env={**os.environ, "URLS": str(urls), "HEADERS": lines},
            capture_output=True,
            text=True,
            check=True,
        )
    return done.stdout


def wrk_latencies(out: str) -> tuple[float, float]:
    """The median and 99th percentile (ms) of what ``wrk --latency`` printed."""
    # anchored: a "+/- Stdev" column such as "72.50%" must not pass for the 50% line
    p50 = _ms(re.search(r"^\s+50%\s+(\S+)", out, re.M)[1])  # type: ignore[index]
    p99 = _ms(re.search(r"^\s+99%\s+(\S+)", out, re.M)[1])  # type: ignore[index]
    return p50, p99


def wrk_rate(
    base: str,
    paths: Sequence[str],
    *,
    headers: dict[str, str] | None = None,
    seconds: int = 10,
    connections: int = 8,
    threads: int = 2,
) -> WrkResult:
    """The rate and latencies of ``wrk`` driving ``base`` over ``paths`` (:func:`wrk_output`).
    Any answer other than 2xx/3xx fails the run: a rate of errors is no rate."""
    out = wrk_output(
        base, paths, headers=headers, seconds=seconds, connections=connections, threads=threads
    )
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if bad or "Socket errors" in out:
        raise RuntimeError(f"wrk at {base} saw errors:\n{out}")
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1])  # type: ignore[index]
    return WrkResult(rate, *wrk_latencies(out))


# --- the database ------------------------------------------------------------------------------

#: the only hosts of ``--pg`` and ``--redis``: a script drops databases and flushes Redis dbs
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
#: the PostgreSQL server a benchmark makes its database on (the URL names no database)
PG_SERVER = "postgresql://postgres@127.0.0.1:5432"


def add_pg_argument(parser: argparse.ArgumentParser) -> None:
    """``--pg``: the PostgreSQL server of the benchmark (checked with :func:`check_loopback`)."""
    parser.add_argument("--pg", default=PG_SERVER, help="server (no database)")


def check_loopback(url: str, what: str) -> None:
    """Stop the run when ``url`` (given as ``what``) is not on this machine."""
    if (urlsplit(url).hostname or "") not in LOOPBACK:
        raise SystemExit(f"{what} {url}: only loopback addresses are used by this benchmark")


def check_flushable(redis_url: str) -> None:
    """Stop the run when ``redis_url`` is a Redis db it must not flush: the service's (0) or
    the tests' (12, 13)."""
    if urlsplit(redis_url).path.strip("/") in ("", "0", "12", "13"):
        raise SystemExit(f"{redis_url}: not flushing the service's or the tests' Redis db")


def sqlalchemy_url(pg: str) -> str:
    """The server ``pg`` (``postgresql://...``) for SQLAlchemy, with psycopg."""
    return pg.replace("postgresql://", "postgresql+psycopg://", 1)


def _admin(pg: str) -> psycopg.Connection[Any]:
    return psycopg.connect(f"{pg}/postgres", autocommit=True, connect_timeout=5)


def drop_database(pg: str, name: str) -> None:
    """Database ``name`` of the server ``pg`` dropped, if it is there."""
    with _admin(pg) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fresh_database(pg: str, name: str) -> str:
    """Database ``name`` of the server ``pg`` made afresh (empty): its SQLAlchemy URL."""
    drop_database(pg, name)
    with _admin(pg) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{sqlalchemy_url(pg)}/{name}"


def load_average() -> str:
    """Other work on the machine skews every figure: shown before and after."""
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


class HttpConnection:
    """One keep-alive HTTP/1.1 connection: a bare client, so that the client is not the limit.

    httpx tops out near a thousand requests per second on one core, which cached tiles exceed;
    this reads just the status, the headers and the body (by length or chunked).
    """

    def __init__(self, host: str, port: int, headers: str = "", source: str | None = None) -> None:
        """``source``: the address it connects from (another client address on loopback)."""
        self.host, self.port, self.headers, self.source = host, port, headers, source
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, target: str) -> tuple[int, dict[str, str], bytes]:
        if self.reader is None or self.writer is None:
            local = None if self.source is None else (self.source, 0)
            self.reader, self.writer = await asyncio.open_connection(
                self.host, self.port, local_addr=local
            )
        reader = self.reader
        request = f"GET {target} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{self.headers}\r\n"
        self.writer.write(request.encode())
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name:
                headers[name.strip().lower()] = value.strip()
        if status in (204, 304) or 100 <= status < 200:
            body = b""
        elif "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass  # trailers
            body = b"".join(parts)
        else:
            body = await reader.read()
            headers["connection"] = "close"
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def add_load_run_arguments(parser: argparse.ArgumentParser, redis: str) -> None:
    """The options :func:`begin_load_run` and :func:`scratch` take: ``--pg``, ``--redis``
    (``redis`` by default), ``--timeout-s``, ``--keep``."""
    add_pg_argument(parser)
    parser.add_argument("--redis", default=redis, help="flushed first")
    parser.add_argument("--timeout-s", type=float, default=900, help="bound of the whole run")
    parser.add_argument("--keep", action="store_true", help="keep the work dir and the database")


def begin_load_run(args: argparse.Namespace) -> tuple[str, Deadline]:
    """The start of a load script (``--pg``, ``--redis``, ``--timeout-s``): both on loopback,
    ``wrk`` installed, a SIGTERM unwinding like Ctrl-C (the servers are stopped), progress
    printed as it goes. PostgreSQL's URL, and the run's deadline."""
    check_loopback(args.pg, "--pg")
    check_loopback(args.redis, "--redis")
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: run `bash deploy/services.sh --test-tools`")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # progress as it goes
    return args.pg.rstrip("/"), Deadline(args.timeout_s)


def scratch(stack: ExitStack, name: str, pg: str, database: str, keep: bool) -> Path:
    """A work dir of a run (with ``logs/``), and its database ``database``: both removed when
    ``stack`` closes (after the servers it stops next), unless ``keep``."""
    work = Path(tempfile.mkdtemp(prefix=f"mapsvc-{name}-"))
    (work / "logs").mkdir()
    if keep:
        print(f"work dir and database {database} kept: {work}")
    else:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        stack.callback(drop_database, pg, database)
    return work


@dataclass
class Wrk:
    """What wrk reported through a script that counts its answers (``counted.lua``, which
    ``stress_bbox.lua`` and ``fair_share.lua`` load): the answers by status, and its summary."""

    statuses: Counter[str]
    summary: dict[str, str]


def parse_wrk(output: str) -> Wrk:
    """The ``wrk-status <status> <count>`` and ``wrk-summary k=v …`` lines of such a run."""
    statuses = Counter(
        {m[1]: int(m[2]) for m in re.finditer(r"^wrk-status (\d+) (\d+)$", output, re.M)}
    )
    found = re.search(r"^wrk-summary (.*)$", output, re.M)
    if found is None:
        raise RuntimeError(f"wrk printed no summary (did its script run?):\n{output[-2000:]}")
    return Wrk(statuses, dict(pair.split("=", 1) for pair in found[1].split()))


def wrk_headers(key: str) -> list[str]:
    """wrk's ``-H`` arguments that send ``key`` (a script's ``wrk.format`` adds them)."""
    return [arg for name, value in auth_headers(key).items() for arg in ("-H", f"{name}: {value}")]
