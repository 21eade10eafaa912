"""Event streams over a real socket: order, replay, resume, isolation, the stream of all jobs."""

from __future__ import annotations

import re
import subprocess
import threading
import time

import httpx
import pytest

from tests.checks import AUTH
from tests.sse import frames, read_job_lines

pytestmark = [pytest.mark.worker, pytest.mark.server]

ELAPSED = re.compile(r" \d+ms$")


def start_probe(base: str, steps: int, delay_ms: int) -> str:
    r = httpx.post(
        f"{base}/api-user/diag/probe?steps={steps}&delay_ms={delay_ms}&async=1", headers=AUTH
    )
    assert r.status_code == 202
    job_id: str = r.json()["id"]
    return job_id


def expected_texts(steps: int) -> list[str]:
    return [f"Probe start: {steps} steps, 0 ms apart"] + [
        f"Probe step {i}/{steps}" for i in range(1, steps + 1)
    ]


def strip_ms(text: str) -> str:
    assert ELAPSED.search(text), f"line does not end with elapsed ms: {text!r}"
    return ELAPSED.sub("", text)


def test_live_subscriber_gets_every_line_in_order(
    live_server: str, worker: subprocess.Popen[bytes]
) -> None:
    steps = 8
    job_id = start_probe(live_server, steps, 150)
    lines = read_job_lines(live_server, job_id)
    texts = [f.data for f in lines]
    assert texts[-1] == "Finish:success"
    body = [strip_ms(t) for t in texts[:-1]]
    assert [re.sub(r"\d+ ms apart", "0 ms apart", t) for t in body] == expected_texts(steps)
    elapsed = [int(ELAPSED.search(t).group()[1:-2]) for t in texts[:-1]]
    assert elapsed == sorted(elapsed)
    assert elapsed[-1] >= steps * 150
    ids = [f.id for f in lines]
    assert all(ids)
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))


def test_late_subscriber_replays_then_follows(
    live_server: str, worker: subprocess.Popen[bytes]
) -> None:
    steps = 10
    job_id = start_probe(live_server, steps, 150)
    time.sleep(0.8)  # some lines are already out when we connect
    url = f"{live_server}/api-user/jobs/{job_id}/events"
    with httpx.stream("GET", url, headers=AUTH, timeout=30) as response:
        texts = [f.data for f in frames(response) if f.data is not None]
    assert texts[0].startswith("Probe start")
    assert [strip_ms(t) for t in texts[1:-1]] == expected_texts(steps)[1:]
    assert texts[-1] == "Finish:success"
    # after the job has ended, a subscriber gets the whole story and the stream ends
    assert [f.data for f in read_job_lines(live_server, job_id)] == texts


def test_last_event_id_resumes_exactly(live_server: str, worker: subprocess.Popen[bytes]) -> None:
    job_id = start_probe(live_server, 6, 100)
    full = read_job_lines(live_server, job_id)
    resumed = read_job_lines(live_server, job_id, last_event_id=full[2].id)
    assert [(f.id, f.data) for f in resumed] == [(f.id, f.data) for f in full[3:]]
    r = httpx.get(
        f"{live_server}/api-user/jobs/{job_id}/events", headers=AUTH | {"Last-Event-ID": "x'; DROP"}
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid-input"


def test_two_concurrent_jobs_do_not_mix(live_server: str, worker: subprocess.Popen[bytes]) -> None:
    jobs = {start_probe(live_server, steps, 60): steps for steps in (12, 7)}
    results: dict[str, list[str]] = {}

    def read(job_id: str) -> None:
        results[job_id] = [f.data for f in read_job_lines(live_server, job_id)]

    threads = [threading.Thread(target=read, args=(job_id,)) for job_id in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for job_id, steps in jobs.items():
        texts = results[job_id]
        assert texts[-1] == "Finish:success"
        assert [strip_ms(t) for t in texts[1:-1]] == expected_texts(steps)[1:]


def test_all_jobs_stream_prefixes_job_ids(
    live_server: str, worker: subprocess.Popen[bytes]
) -> None:
    seen: list[str] = []
    connected = threading.Event()

    def listen() -> None:
        with httpx.stream(
            "GET", f"{live_server}/api-user/events", headers=AUTH, timeout=30
        ) as response:
            for frame in frames(response):
                connected.set()
                if frame.data is not None:
                    seen.append(frame.data)
                    if sum(d.endswith("Finish:success") for d in seen) == 2:
                        return

    listener = threading.Thread(target=listen)
    listener.start()
    assert connected.wait(10)
    a = start_probe(live_server, 3, 50)
    b = start_probe(live_server, 2, 50)
    listener.join(timeout=60)
    for job_id, steps in ((a, 3), (b, 2)):
        mine = [d[len(job_id) + 1 :] for d in seen if d.startswith(f"{job_id} ")]
        assert [strip_ms(t) for t in mine[1:-1]] == expected_texts(steps)[1:]
        assert mine[-1] == "Finish:success"


def test_idle_stream_sends_keepalive_comments(
    live_server: str, worker: subprocess.Popen[bytes]
) -> None:
    comments = []
    with httpx.stream(
        "GET", f"{live_server}/api-user/events", headers=AUTH, timeout=10
    ) as response:
        assert response.headers["cache-control"] == "no-cache"
        t0 = time.monotonic()
        for frame in frames(response):
            if frame.comment is not None:
                comments.append(frame.comment)
            if len(comments) >= 3 or time.monotonic() - t0 > 6:
                break
    assert comments[0] == "mapsvc event stream"
    assert "keep-alive" in comments[1:]


def test_failed_job_stream_ends_with_its_error(
    live_server: str, worker: subprocess.Popen[bytes]
) -> None:
    r = httpx.post(
        f"{live_server}/api-user/diag/probe?steps=3&delay_ms=10&fail_at=3&async=1", headers=AUTH
    )
    texts = [f.data for f in read_job_lines(live_server, r.json()["id"])]
    assert texts[-1] == "Finish:error: probe failed on purpose at step 3"
    assert [strip_ms(t) for t in texts[1:-1]] == ["Probe step 1/3", "Probe step 2/3"]
