"""Hostile use of jobs and event streams: each refused cleanly or bounded, and nothing lost.

Stream caps, stream durations and the stream pool are tried on a real uvicorn server with small
limits; stalled jobs against the real worker (whose embedded beat runs the watchdog).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest
import redis
import uvicorn
from starlette.applications import Starlette
from starlette.testclient import TestClient

from api.app import create_app
from shared import events
from shared.jobs import JobReporter, JobStore
from shared.settings import Settings
from tests.checks import AUTH, HEALTHY, assert_error
from tests.conftest import admin_client, free_port
from tests.jobs import wait_running, wait_state
from tests.layers import RGB, RGB_ID, configure
from tests.sse import frames, read_job_lines

pytestmark = [pytest.mark.worker, pytest.mark.server]

MAX_ID = 2**64 - 1
STALLED = "Finish:error: the job stalled: no progress line for "


@contextmanager
def served(settings: Settings) -> Iterator[tuple[str, Starlette]]:
    """The API with ``settings`` on a real socket, and the app (to look at its state)."""
    app = create_app(settings)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}", app
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def open_streams(stack: ExitStack, http: httpx.Client, count: int) -> None:
    """Open ``count`` streams of all jobs, held until ``stack`` closes."""
    for _ in range(count):
        response = stack.enter_context(http.stream("GET", "/api-user/events"))
        assert response.status_code == 200


def wait_streams_closed(app: Starlette) -> None:
    deadline = time.monotonic() + 10  # the server notices a gone client at its next write
    while app.state.services.jobs.open_streams and time.monotonic() < deadline:
        time.sleep(0.1)
    assert app.state.services.jobs.open_streams == 0


def job_keys(rdb: redis.Redis) -> set[str]:
    return set(rdb.scan_iter("mapsvc:job:*", count=1000))


def stalled_record(store: JobStore, silent_s: float) -> str:
    """A job that started, wrote a line, and then heard nothing of its worker for ``silent_s``."""
    job_id = str(uuid.uuid4())
    store.create(job_id, "probe", {"steps": 5, "delay_ms": 0, "fail_at": 0})
    report = JobReporter(store, job_id)
    report.start(worker="gone@host pid 999999", kind="test")
    report.line("Probe start: 5 steps, 0 ms apart")
    store.update(job_id, beat=time.time() - silent_s)
    return job_id


def finals(rdb: redis.Redis, job_id: str) -> list[str]:
    entries = rdb.xrange(events.job_stream(job_id))
    return [fields["text"] for _, fields in entries if fields["final"] == "1"]


def test_stream_cap_is_503_with_retry_after_and_others_answer(
    settings: Settings, worker: subprocess.Popen[bytes]
) -> None:
    capped = settings.model_copy(update={"sse_max_streams": 3})
    with (
        served(capped) as (base, app),
        httpx.Client(base_url=base, headers=AUTH, timeout=10) as http,
    ):
        job_id = http.post("/api-user/diag/probe?steps=2&delay_ms=0").headers["x-job-id"]
        with ExitStack() as held:
            open_streams(held, http, 3)
            assert app.state.services.jobs.open_streams == 3
            for path in ("/api-user/events", f"/api/v1/jobs/{job_id}/events"):
                t0 = time.monotonic()
                r = http.get(path)
                assert time.monotonic() - t0 < 2
                assert r.status_code == 503
                assert r.headers["retry-after"] == "5"
                error = assert_error(r.json(), "unavailable")
                assert error["detail"]["limit"] == 3
            # everything else still answers, jobs and their waits included
            assert http.get("/api-user/health").json() == HEALTHY
            assert http.get("/api-user/ready").json()["status"] == "ready"
            assert http.get(f"/api-user/jobs/{job_id}").json()["state"] == "succeeded"
            probe = http.post("/api-user/diag/probe?steps=2&delay_ms=10")
            assert probe.status_code == 200
            assert probe.json()["steps"] == 2
        wait_streams_closed(app)  # every slot came back
        texts = [f.data for f in read_job_lines(base, job_id)]
        assert texts[-1] == "Finish:success"


def test_stream_ends_after_its_longest_time_and_resumes_losslessly(
    settings: Settings, worker: subprocess.Popen[bytes], live_server: str
) -> None:
    short = settings.model_copy(update={"sse_max_duration_s": 1.5})
    with served(short) as (base, app):
        job_id = httpx.post(
            f"{base}/api-user/diag/probe?steps=12&delay_ms=250&async=1", headers=AUTH
        ).json()["id"]
        got: list[tuple[str | None, str | None]] = []
        comments: list[str] = []
        connections = 0
        while not got or got[-1][1] != "Finish:success":
            connections += 1
            assert connections < 20
            headers = AUTH | ({"Last-Event-ID": str(got[-1][0])} if got else {})
            t0 = time.monotonic()
            url = f"{base}/api-user/jobs/{job_id}/events"
            with httpx.stream("GET", url, headers=headers, timeout=10) as r:
                assert r.status_code == 200
                for frame in frames(r):
                    if frame.comment is not None:
                        comments.append(frame.comment)
                    if frame.data is not None:
                        got.append((frame.id, frame.data))
            assert time.monotonic() - t0 < 1.5 + 2.5
        assert connections >= 2
        assert "longest stream time reached; reconnect with Last-Event-ID" in comments
        # nothing lost, nothing twice: the same lines as one uninterrupted read
        full = read_job_lines(live_server, job_id)
        assert got == [(f.id, f.data) for f in full]
        # the stream of all jobs, which never ends by itself, ends too
        t0 = time.monotonic()
        with httpx.stream("GET", f"{base}/api-user/events", headers=AUTH, timeout=10) as r:
            assert r.status_code == 200
            ended = [f.comment for f in frames(r) if f.comment is not None]
        assert 1.4 < time.monotonic() - t0 < 4
        assert ended[-1] == "longest stream time reached; reconnect with Last-Event-ID"
        wait_streams_closed(app)


def test_last_event_id_out_of_range_is_400(
    client: TestClient, live_server: str, worker: subprocess.Popen[bytes]
) -> None:
    job_id = client.post("/api-user/diag/probe?steps=3&delay_ms=0").headers["x-job-id"]
    full = read_job_lines(live_server, job_id)
    last = full[-1].id
    assert last is not None
    ms, seq = map(int, last.split("-"))
    url = f"{live_server}/api-user/jobs/{job_id}/events"
    malformed = ["x'; DROP", "1-2-3", "-1", "1-", "١٢٣", f"{MAX_ID + 1}-0", f"0-{MAX_ID + 1}"]
    malformed.append("9" * 25)
    later = [f"{ms}-{seq + 1}", f"{ms + 1}", f"{MAX_ID}-{MAX_ID}"]
    for value in malformed + later:
        for r in (
            httpx.get(url, headers=AUTH | {"Last-Event-ID": value.encode()}, timeout=5),
            httpx.get(url, params={"after": value}, headers=AUTH, timeout=5),
        ):
            assert r.status_code == 400, value
            error = assert_error(r.json(), "invalid-input")
            if value in later:
                assert error["detail"]["last_event_id"] == last
    r = httpx.get(
        f"{live_server}/api-user/events", params={"after": f"{MAX_ID + 1}-0"}, headers=AUTH
    )
    assert r.status_code == 400
    assert_error(r.json(), "invalid-input")
    # in range: the final line seen, nothing is left (204 stops an EventSource) ...
    for value in (last, "$"):
        r = httpx.get(url, headers=AUTH | {"Last-Event-ID": value}, timeout=5)
        assert r.status_code == 204, value
        assert r.content == b""
    # ... and the stream still resumes exactly
    resumed = read_job_lines(live_server, job_id, last_event_id=full[0].id)
    assert [(f.id, f.data) for f in resumed] == [(f.id, f.data) for f in full[1:]]


def test_stream_pool_exhausted_is_503_fast_and_others_answer(
    settings: Settings,
    rdb: redis.Redis,
    raster_dir: Path,
    vector_tables: str,  # the vector layers must exist
    worker: subprocess.Popen[bytes],
) -> None:
    configure(settings, rdb, RGB)
    tight = settings.model_copy(
        update={"stream_redis_max_connections": 2, "stream_redis_wait_s": 0.5}
    )
    with (
        served(tight) as (base, app),
        httpx.Client(base_url=base, headers=AUTH, timeout=30) as http,
    ):
        job_id = http.post("/api-user/diag/probe?steps=2&delay_ms=0").headers["x-job-id"]
        with ExitStack() as held:
            open_streams(held, http, 2)
            before = job_keys(rdb)
            for method, path in (
                ("GET", "/api-user/events"),
                ("GET", f"/api-user/jobs/{job_id}/events"),
                ("POST", "/api-user/diag/probe?steps=2&delay_ms=0"),  # its wait needs one too
            ):
                t0 = time.monotonic()
                r = http.request(method, path)
                assert time.monotonic() - t0 < 2, path
                assert r.status_code == 503, path
                assert r.headers["retry-after"] == "2"
                assert (
                    "too many event streams and job waits"
                    in assert_error(r.json(), "unavailable")["message"]
                )
            assert job_keys(rdb) == before  # the refused probe was never enqueued
            assert app.state.services.jobs.open_streams == 2  # a refused stream gave its slot back
            # the rest of the API does not share that pool
            t0 = time.monotonic()
            assert http.get("/api-user/health").json() == HEALTHY
            tile = http.get(f"/api-user/rtile/{RGB_ID}/en/10/290/442.png")
            assert tile.status_code == 200
            assert tile.content.startswith(b"\x89PNG")
            geojson = http.get("/api-user/geojson/public.countries?limit=2")
            assert geojson.status_code == 200
            assert len(geojson.json()["features"]) == 2
            assert http.get(f"/api-user/jobs/{job_id}").json()["state"] == "succeeded"
            assert http.post("/api-user/diag/probe?steps=1&async=1").status_code == 202
            assert time.monotonic() - t0 < 20
        wait_streams_closed(app)
        # the pool is whole again
        probe = http.post("/api-user/diag/probe?steps=2&delay_ms=0")
        assert probe.status_code == 200
        assert [f.data for f in read_job_lines(base, job_id)][-1] == "Finish:success"


def test_probe_is_off_unless_configured(settings: Settings, rdb: redis.Redis) -> None:
    assert Settings.model_fields["diag_probe"].default is False
    off = settings.model_copy(update={"diag_probe": False})
    before = job_keys(rdb)
    with admin_client(create_app(off), raise_server_exceptions=False) as tc:
        unknown = tc.get("/api-user/diag/nothing")
        for path in ("/api-user/diag/probe", "/api/v1/diag/probe?steps=2&delay_ms=0&async=1"):
            r = tc.post(path)
            assert r.status_code == 404
            error = assert_error(r.json(), "not-found")
            # answered as if there were no such route
            assert error["message"] == f"no route POST {path.split('?')[0]}"
            assert unknown.json()["error"]["message"].startswith("no route GET ")
        assert tc.get("/api-user/health").json() == HEALTHY
    assert job_keys(rdb) == before  # nothing was enqueued


def test_stalled_job_ends_failed_once_when_read(
    settings: Settings, rdb: redis.Redis, client: TestClient, live_server: str
) -> None:
    store = JobStore(rdb, settings)
    stalled = stalled_record(store, settings.jobs.stall_s + 5)
    alive = stalled_record(store, settings.jobs.stall_s - 60)
    job = client.get(f"/api-user/jobs/{stalled}").json()
    assert job["state"] == "failed"
    assert job["error"]["code"] == "unavailable"
    assert job["error"]["message"].startswith("the job stalled: no progress line for ")
    assert "gone@host pid 999999" in job["error"]["message"]
    assert job["last_line"].startswith(STALLED)
    texts = [f.data for f in read_job_lines(live_server, stalled, timeout=10)]
    assert texts[0].startswith("Probe start")
    assert texts[-1].startswith(STALLED)
    # read again (and by the workers' watchdog): still one final line
    assert client.get(f"/api-user/jobs/{stalled}").json()["state"] == "failed"
    assert store.end_stalled(settings.jobs.stall_s) == []
    assert len(finals(rdb, stalled)) == 1
    # a job that wrote a line recently is left alone
    assert client.get(f"/api-user/jobs/{alive}").json()["state"] != "failed"
    assert store.get(alive).outcome is None  # type: ignore[union-attr]


def test_watchdog_of_the_workers_ends_a_job_nobody_reads(
    settings: Settings, rdb: redis.Redis, worker: subprocess.Popen[bytes]
) -> None:
    store = JobStore(rdb, settings)
    job_id = stalled_record(store, settings.jobs.stall_s + 5)
    deadline = time.monotonic() + 10 * settings.jobs.watchdog_interval_s + 10
    while rdb.hget(f"mapsvc:job:{job_id}", "outcome") is None:
        assert time.monotonic() < deadline, "the watchdog did not end the job"
        time.sleep(0.2)
    record = store.get(job_id)
    assert record is not None
    assert record.outcome == "failed"
    [final] = finals(rdb, job_id)
    assert final.startswith(STALLED)
    # the stream of all jobs has it too
    mine = [f["text"] for _, f in rdb.xrevrange(events.ALL_JOBS_STREAM, count=500)]
    assert final in mine
    assert worker.poll() is None


def test_frozen_worker_job_ends_failed_and_writes_nothing_after(
    settings: Settings, rdb: redis.Redis, live_server: str, worker: subprocess.Popen[bytes]
) -> None:
    quick = settings.model_copy(update={"job_stall_s": 1.5})
    with admin_client(create_app(quick)) as tc:
        job_id = tc.post("/api-user/diag/probe?steps=60&delay_ms=100&async=1").json()["id"]
        runner = wait_running(tc, job_id)["worker"]
        pid = int(runner.rsplit(" ", 1)[1])
        os.kill(pid, signal.SIGSTOP)  # the worker process is there but does nothing
        try:
            job = wait_state(tc, job_id, timeout=20)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert job["state"] == "failed", job
        assert job["error"]["message"].startswith("the job stalled")
        assert runner in job["error"]["message"]
        length = rdb.xlen(events.job_stream(job_id))
        # woken up, the job stops at its next line instead of writing after its end
        time.sleep(1.5)
        assert rdb.xlen(events.job_stream(job_id)) == length
        texts = [f.data for f in read_job_lines(live_server, job_id, timeout=10)]
        assert texts[-1].startswith(STALLED)
        assert sum(t.startswith("Finish:") for t in texts) == 1
        assert wait_state(tc, job_id)["state"] == "failed"
        # the process works on
        again = tc.post("/api-user/diag/probe?steps=2&delay_ms=0")
        assert again.status_code == 200
    assert worker.poll() is None


def test_every_key_a_job_writes_expires(
    client: TestClient, rdb: redis.Redis, live_server: str, worker: subprocess.Popen[bytes]
) -> None:
    done = client.post("/api-user/diag/probe?steps=3&delay_ms=0").headers["x-job-id"]
    failed = client.post("/api-user/diag/probe?steps=3&delay_ms=0&fail_at=2").json()
    failed_id = failed["error"]["detail"]["job_id"]
    cancelled = client.post("/api-user/diag/probe?steps=100&delay_ms=100&async=1").json()["id"]
    wait_running(client, cancelled)
    client.delete(f"/api-user/jobs/{cancelled}")
    jobs = client.app.state.services.jobs  # type: ignore[attr-defined]
    enqueue = functools.partial(
        jobs.enqueue, "probe", "diag.probe", {"steps": 2, "delay_ms": 0, "fail_at": 0}, dedup=True
    )
    assert client.portal is not None
    deduped = client.portal.call(enqueue)
    for job_id in (done, failed_id, cancelled, deduped):
        assert wait_state(client, job_id)["state"] in {"succeeded", "failed", "cancelled"}
        read_job_lines(live_server, job_id, timeout=10)
        keys = set(rdb.scan_iter(f"*{job_id}*", count=1000))
        assert {f"mapsvc:job:{job_id}", events.job_stream(job_id)} <= keys
        assert f"mapsvc:job:{job_id}:final" in keys
        for key in keys:
            assert rdb.ttl(key) > 0, key
    dedup_keys = list(rdb.scan_iter("mapsvc:dedup:*", count=1000))
    assert dedup_keys
    for key in dedup_keys:
        assert rdb.ttl(key) > 0, key
    # a job whose record expired: counting a start or setting a field writes nothing
    store = jobs.store
    gone = str(uuid.uuid4())
    assert store.count_attempt(gone) == 0
    store.update(gone, progress=0.5)
    assert not rdb.exists(f"mapsvc:job:{gone}")
