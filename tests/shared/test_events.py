"""Event lines and job records in the real Redis."""

from __future__ import annotations

import uuid

import pytest
import redis

from shared import events
from shared.errors import JobCancelledError, UnprocessableError
from shared.jobs import JobReporter, JobStore
from shared.redis_clients import async_client
from shared.settings import Settings


@pytest.fixture
def store(rdb: redis.Redis, settings: Settings) -> JobStore:
    return JobStore(rdb, settings)


def new_job(store: JobStore) -> str:
    job_id = str(uuid.uuid4())
    store.create(job_id, "test", {"a": 1})
    return job_id


def test_a_job_gets_exactly_one_final_line(store: JobStore, rdb: redis.Redis) -> None:
    job_id = new_job(store)
    store.publish(job_id, "one")
    assert store.finish(job_id, "succeeded", "Finish:success") is not None
    assert store.finish(job_id, "cancelled", "Finish:cancelled") is None
    entries = rdb.xrange(events.job_stream(job_id))
    assert [(f["text"], f["final"]) for _, f in entries] == [
        ("one", "0"),
        ("Finish:success", "1"),
    ]
    record = store.get(job_id)
    assert record is not None
    assert record.outcome == "succeeded"
    assert 0 < rdb.ttl(events.job_stream(job_id)) <= store.ttl_s


@pytest.mark.anyio
async def test_follow_replays_from_an_entry_and_times_out_idle(
    store: JobStore, settings: Settings
) -> None:
    job_id = new_job(store)
    ids = [store.publish(job_id, f"line {i}") for i in range(5)]

    async def read(after: str, n: int) -> list[events.JobEvent | None]:
        client = async_client(settings.redis_url)
        got: list[events.JobEvent | None] = []
        async for event in events.follow(client, events.job_stream(job_id), after, block_s=0.2):
            got.append(event)
            if len(got) == n:
                break
        await client.aclose()
        return got

    replay = await read("0", 6)
    assert [e.text for e in replay[:5] if e] == [f"line {i}" for i in range(5)]
    assert replay[5] is None  # idle tick after the last line
    resumed = await read(ids[2] or "", 2)
    assert [e.text if e else None for e in resumed] == ["line 3", "line 4"]
    assert await read("$", 1) == [None]


def test_reporter_lines_end_with_elapsed_ms(store: JobStore, rdb: redis.Redis) -> None:
    job_id = new_job(store)
    report = JobReporter(store, job_id)
    report.start(worker="w", kind="test")
    report.line("Start raster: x", progress=0.25)
    report.json({"smallRaster": True})
    texts = [f["text"] for _, f in rdb.xrange(events.job_stream(job_id))]
    assert texts[0].startswith("Start raster: x ")
    assert texts[0].endswith("ms")
    assert texts[1] == '{"smallRaster":true}'
    record = store.get(job_id)
    assert record is not None
    assert record.progress == 0.25
    assert record.worker == "w"


def test_reporter_stops_a_cancelled_job(store: JobStore) -> None:
    job_id = new_job(store)
    report = JobReporter(store, job_id)
    report.line("before")
    store.request_cancel(job_id)
    with pytest.raises(JobCancelledError):
        report.line("after")


def test_failure_keeps_the_error_for_users(store: JobStore) -> None:
    job_id = new_job(store)
    JobReporter(store, job_id).fail(UnprocessableError("bad raster", file="a.tif"))
    record = store.get(job_id)
    assert record is not None
    assert record.outcome == "failed"
    assert record.error == {
        "code": "unprocessable",
        "message": "bad raster",
        "detail": {"file": "a.tif"},
    }
    assert record.last_line == "Finish:error: bad raster"


def test_unknown_job_has_no_record(store: JobStore) -> None:
    assert store.get(str(uuid.uuid4())) is None
