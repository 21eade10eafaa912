"""The job pipeline through the API: heavy-endpoint reply, job descriptor, cancel, bad input."""

from __future__ import annotations

import functools
import json
import subprocess
import time
import uuid

import pytest
from starlette.testclient import TestClient

from shared.diag import MAX_PROBE_DELAY_MS
from shared.settings import Settings
from tests.checks import assert_error
from tests.conftest import admin_client
from tests.jobs import wait_running, wait_state

pytestmark = pytest.mark.worker


def test_probe_answers_result_when_done_in_time(
    client: TestClient, worker: subprocess.Popen[bytes]
) -> None:
    r = client.post("/api-user/diag/probe?steps=3&delay_ms=10")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["steps"] == 3
    assert body["ms"] >= 30
    job = client.get(f"/api-user/jobs/{r.headers['x-job-id']}").json()
    assert job["state"] == "succeeded"
    assert job["kind"] == "probe"
    assert job["progress"] == 1.0
    assert job["result"] == body
    assert job["params"] == {"steps": 3, "delay_ms": 10, "fail_at": 0}
    assert job["last_line"] == "Finish:success"
    assert job["created"] <= job["started"] <= job["finished"]
    assert job["created"].endswith("Z")


def test_async_answers_202_with_descriptor(
    client: TestClient, worker: subprocess.Popen[bytes]
) -> None:
    r = client.post("/api/v1/diag/probe?steps=2&delay_ms=50&async=1")
    assert r.status_code == 202
    job = r.json()
    assert job["state"] in {"queued", "running"}
    assert job["links"] == {
        "self": f"/api/v1/jobs/{job['id']}",
        "events": f"/api/v1/jobs/{job['id']}/events",
    }
    assert r.headers["location"] == job["links"]["self"]
    assert wait_state(client, job["id"])["state"] == "succeeded"


def test_slow_job_answers_202_after_job_wait(
    settings: Settings, worker: subprocess.Popen[bytes]
) -> None:
    from api.app import create_app

    quick = settings.model_copy(update={"job_wait_s": 0.5})
    with admin_client(create_app(quick)) as tc:
        t0 = time.monotonic()
        r = tc.post("/api-user/diag/probe?steps=10&delay_ms=200")
        waited = time.monotonic() - t0
        assert r.status_code == 202
        assert 0.4 < waited < 3
        assert r.json()["state"] in {"queued", "running"}
        assert wait_state(tc, r.json()["id"])["state"] == "succeeded"


def test_failed_job_gives_its_error(client: TestClient, worker: subprocess.Popen[bytes]) -> None:
    r = client.post("/api-user/diag/probe?steps=3&delay_ms=10&fail_at=2")
    assert r.status_code == 422
    error = assert_error(r.json(), "unprocessable")
    assert error["message"] == "probe failed on purpose at step 2"
    assert error["detail"]["step"] == 2
    job = client.get(f"/api-user/jobs/{error['detail']['job_id']}").json()
    assert job["state"] == "failed"
    assert job["error"]["code"] == "unprocessable"
    assert job["last_line"] == "Finish:error: probe failed on purpose at step 2"


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("steps=0", "steps"),
        ("steps=abc", "steps"),
        ("delay_ms=-1", "delay_ms"),
        (f"delay_ms={MAX_PROBE_DELAY_MS + 1}", "delay_ms"),
        ("steps=2&fail_at=5", None),
        ("async=maybe", "async"),
    ],
)
def test_bad_probe_parameters_are_400(
    client: TestClient, query: str, parameter: str | None
) -> None:
    r = client.post(f"/api-user/diag/probe?{query}")
    assert r.status_code == 400
    error = assert_error(r.json(), "invalid-input")
    if parameter:
        assert error["detail"]["parameter"] == parameter


def test_the_streams_document_last_event_id_and_after(client: TestClient) -> None:
    paths = client.get("/api-user/openapi.json").json()["paths"]
    for path in ("/events", "/jobs/{job_id}/events"):
        named = {(p["in"], p["name"]) for p in paths[path]["get"]["parameters"]}
        assert {("header", "Last-Event-ID"), ("query", "after")} <= named, path


def test_unknown_job_is_404(client: TestClient) -> None:
    job_id = str(uuid.uuid4())
    for method, path in [
        ("GET", f"/api-user/jobs/{job_id}"),
        ("DELETE", f"/api-user/jobs/{job_id}"),
        ("GET", f"/api-user/jobs/{job_id}/events"),
    ]:
        r = client.request(method, path)
        assert r.status_code == 404, path
        assert job_id in assert_error(r.json(), "not-found")["message"]


def test_malformed_job_id_is_400(client: TestClient) -> None:
    for path in ["/api-user/jobs/not-a-uuid", "/api-user/jobs/..%2F..%2Fetc/events"]:
        r = client.get(path)
        assert r.status_code in (400, 404)
        assert r.json()["error"]["code"] in {"invalid-input", "not-found"}
    r = client.get("/api-user/jobs/not-a-uuid")
    assert r.status_code == 400
    assert_error(r.json(), "invalid-input")


def test_cancel_running_job(client: TestClient, worker: subprocess.Popen[bytes]) -> None:
    job_id = client.post("/api-user/diag/probe?steps=100&delay_ms=100&async=1").json()["id"]
    assert wait_running(client, job_id)["state"] == "running"
    r = client.delete(f"/api-user/jobs/{job_id}")
    assert r.status_code == 202
    assert r.json()["cancel_requested"] is True
    job = wait_state(client, job_id, timeout=10)
    assert job["state"] == "cancelled"
    assert job["last_line"] == "Finish:cancelled"
    assert job["progress"] < 0.5
    again = client.delete(f"/api-user/jobs/{job_id}")
    assert again.status_code == 409
    assert_error(again.json(), "conflict")


def test_cancel_queued_job_ends_it_at_once(
    client: TestClient, worker: subprocess.Popen[bytes]
) -> None:
    # two pool processes: two long jobs keep them busy, the third waits in the queue
    busy = [
        client.post("/api-user/diag/probe?steps=30&delay_ms=100&async=1").json()["id"]
        for _ in range(2)
    ]
    queued = client.post("/api-user/diag/probe?steps=1&delay_ms=0&async=1").json()["id"]
    for job_id in busy:
        wait_running(client, job_id)
    assert client.get(f"/api-user/jobs/{queued}").json()["state"] == "queued"
    r = client.delete(f"/api-user/jobs/{queued}")
    assert r.status_code == 200
    assert r.json()["state"] == "cancelled"
    for job_id in busy:
        client.delete(f"/api-user/jobs/{job_id}")
    for job_id in busy:
        assert wait_state(client, job_id)["state"] == "cancelled"
    # the cancelled job never ran, even once a process was free
    time.sleep(0.5)
    job = client.get(f"/api-user/jobs/{queued}").json()
    assert job["state"] == "cancelled"
    assert job["started"] is None


def test_identical_job_joins_the_running_one(
    client: TestClient, worker: subprocess.Popen[bytes]
) -> None:
    jobs = client.app.state.services.jobs  # type: ignore[attr-defined]
    params = {"steps": 10, "delay_ms": 100, "fail_at": 0}
    enqueue = functools.partial(jobs.enqueue, "probe", "diag.probe", params, dedup=True)
    assert client.portal is not None
    first = client.portal.call(enqueue)
    assert client.portal.call(enqueue) == first
    assert wait_state(client, first)["state"] == "succeeded"
    third = client.portal.call(enqueue)
    assert third != first
    assert wait_state(client, third)["state"] == "succeeded"


@pytest.mark.worker
def test_the_jobs_collection_lists_pages_and_filters(
    client: TestClient, settings: Settings, worker: subprocess.Popen[bytes]
) -> None:
    kind = "probe"
    ids = []
    for _ in range(3):
        r = client.post("/api-user/diag/probe?steps=1&delay_ms=1&async=1")
        assert r.status_code == 202
        ids.append(r.json()["id"])
        time.sleep(0.01)  # distinct creation times
    for job_id in ids:
        assert wait_state(client, job_id)["state"] == "succeeded"
    newest = client.get("/api-user/jobs", params={"kind": kind, "limit": 200}).json()
    listed = [job["id"] for job in newest["jobs"]]
    assert [i for i in listed if i in ids] == ids[::-1]  # newest first
    first = newest["jobs"][0]
    assert first == client.get(f"/api-user/jobs/{first['id']}").json()  # each as GET /jobs/{id}
    assert {job["kind"] for job in newest["jobs"]} == {kind}
    # pages: two at a time, following next
    pages: list[str] = []
    url: str | None = "/api-user/jobs?kind=probe&limit=2"
    while url and len(pages) < 100:
        page = client.get(url).json()
        assert page["limit"] == 2
        assert len(page["jobs"]) <= 2
        pages += [job["id"] for job in page["jobs"]]
        url = page["next"]
        # relative (never from Host), the same query with the next offset
        assert url is None or url == f"/api-user/jobs?kind=probe&limit=2&offset={len(pages)}"
    assert pages == listed
    oldest = client.get("/api-user/jobs", params={"kind": kind, "ord": "created", "limit": 200})
    assert [job["id"] for job in oldest.json()["jobs"]] == listed[::-1]
    succeeded = client.get("/api-user/jobs", params={"kind": kind, "state": "failed"}).json()
    assert not set(ids) & {job["id"] for job in succeeded["jobs"]}
    other = client.get("/api-user/jobs", params={"kind": "no-such-kind"}).json()
    assert other == {"jobs": [], "limit": 50, "offset": 0, "next": None}


def test_the_jobs_collection_shows_others_their_own_jobs_only(
    client: TestClient, settings: Settings
) -> None:
    from redis import Redis

    from shared.jobs import JobStore

    made = client.post("/api-user/api-keys", json={"name": "jobs", "role": "reader"}).json()
    store = JobStore(Redis.from_url(settings.redis_url), settings)
    mine, theirs = str(uuid.uuid4()), str(uuid.uuid4())
    store.create(mine, "pretile", {}, owner=f"key:{made['id']}", layer="abc")
    store.create(theirs, "pretile", {}, owner="key:someone-else", layer="abc")
    reader = {"Authorization": f"Bearer {made['key']}"}
    seen = client.get("/api-user/jobs", headers=reader).json()["jobs"]
    assert [job["id"] for job in seen] == [mine]
    assert seen[0]["layer"] == "abc"
    everyone = client.get("/api-user/jobs", params={"layer": "abc", "limit": 200}).json()["jobs"]
    assert {mine, theirs} <= {job["id"] for job in everyone}  # an admin sees every job
    assert client.get("/api-user/jobs", params={"layer": "zzz"}).json()["jobs"] == []


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"state": "sleeping"}, "state"),
        ({"ord": "name"}, "ord"),
        ({"limit": "0"}, "limit"),
        ({"limit": "201"}, "limit"),
        ({"offset": "-1"}, "offset"),
        ({"kind": "k" * 65}, "kind"),
    ],
)
def test_the_jobs_collection_refuses_bad_queries(
    client: TestClient, params: dict[str, str], parameter: str
) -> None:
    r = client.get("/api-user/jobs", params=params)
    assert r.status_code == 400
    assert assert_error(r.json(), "invalid-input")["detail"]["parameter"] == parameter
    assert client.get("/api-user/health").status_code == 200


@pytest.mark.worker
def test_a_job_carries_the_request_id_into_its_record_and_its_log_lines(
    client: TestClient, worker: subprocess.Popen[bytes], tmp_path_factory: pytest.TempPathFactory
) -> None:
    trace = f"trace-{uuid.uuid4().hex[:12]}"
    r = client.post(
        "/api-user/diag/probe?steps=1&delay_ms=1&async=1", headers={"X-Request-ID": trace}
    )
    assert r.headers["x-request-id"] == trace
    job = wait_state(client, r.json()["id"])
    assert job["state"] == "succeeded"
    assert job["request_id"] == trace
    logs = list(tmp_path_factory.getbasetemp().glob("worker*/worker.log"))
    assert logs
    deadline = time.monotonic() + 10
    while True:  # the worker writes its lines as the job runs; read until they are there
        lines = [
            json.loads(line)
            for log in logs
            for line in log.read_text().splitlines()
            if line.startswith("{")
        ]
        mine = [line for line in lines if line.get("job_id") == job["id"]]
        if any("succeeded" in line["message"] for line in mine) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert any("started" in line["message"] for line in mine), mine
    assert any("succeeded" in line["message"] for line in mine), mine
    assert {line["request_id"] for line in mine} == {trace}
