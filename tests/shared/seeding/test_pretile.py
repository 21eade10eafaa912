"""Pre-tiling plans, their chunks, and the run's counters in Redis."""

from __future__ import annotations

import shutil
import time
import uuid
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from shared.base.grid import TileAddress
from shared.errors import InvalidInputError, JobCancelledError, UnprocessableError
from shared.job_messages import Pretile
from shared.jobs import JobReporter, JobStore
from shared.seeding.coverage import Coverage
from shared.seeding.plan import (
    CHUNK,
    Chunk,
    check_ceiling,
    check_zooms,
    chunks,
    count_chunks,
    plan_pretile,
)
from shared.seeding.pretile import LayerLock, PretileCounters, RunSlots, free_run
from shared.seeding.pretile_run import PretileJob, PretileRunner
from shared.settings import Settings
from shared.tiles.store import FileTileStore
from tests.conftest import REDIS_URL

WORLD = [-180.0, -85.0511287798066, 180.0, 85.0511287798066]
#: the footprint of the Landsat scene of the demo rasters
SCENE = [-78.9586, 23.565, -76.5749, 25.5509]


def zooms(plan: dict[str, Any]) -> list[tuple[int, int, bool]]:
    return [(z["zoom"], z["tiles"], z["tiled"]) for z in plan["zooms"]]


def test_whole_zooms_are_tiled_while_they_fit_under_the_cap() -> None:
    plan = plan_pretile(WORLD, 2, 6, cap=100)

    assert zooms(plan) == [(2, 16, True), (3, 64, True), (4, 256, False), (5, 1024, False)]
    assert (plan["total"], plan["cut"]) == (80, [4, 5])
    assert (plan["minzoom"], plan["maxzoom"], plan["cap"]) == (2, 6, 100)


def test_the_first_zoom_is_tiled_whole_but_not_past_the_ceiling() -> None:
    plan = plan_pretile(WORLD, 4, 6, cap=100, ceiling=256)
    assert zooms(plan) == [(4, 256, True), (5, 1024, False)]
    assert (plan["total"], plan["over_ceiling"]) == (256, False)
    check_ceiling(plan)

    over = plan_pretile(WORLD, 4, 6, cap=100, ceiling=255)
    assert over["over_ceiling"] is True
    with pytest.raises(UnprocessableError, match="256 tiles, above the ceiling of 255") as caught:
        check_ceiling(over)
    assert caught.value.detail == {"plan": over}


def test_a_footprint_on_tile_edges_takes_no_tile_beyond_them() -> None:
    # zoom 2 tiles are 90 degrees wide: 0..90 E is one column, 0..10 N lies in one row
    plan = plan_pretile([0.0, 0.0, 90.0, 10.0], 2, 3)
    assert zooms(plan) == [(2, 1, True)]
    assert [list(c.tiles()) for c in chunks([0.0, 0.0, 90.0, 10.0], plan)] == [
        [TileAddress(2, 2, 1)]
    ]
    # latitudes past the grid's edge are clamped to it
    assert zooms(plan_pretile([-180.0, -90.0, 180.0, 90.0], 1, 2)) == [(1, 4, True)]


@pytest.mark.parametrize(
    ("minzoom", "maxzoom", "parameter"),
    [
        (-1, 3, "minzoom"),
        (25, 26, "minzoom"),
        (3, 26, "maxzoom"),
        (3, 3, "minzoom"),
        (5, 4, "minzoom"),
    ],
)
def test_a_bad_zoom_range_is_refused(minzoom: int, maxzoom: int, parameter: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        check_zooms(minzoom, maxzoom)
    assert caught.value.detail == {"parameter": parameter}
    with pytest.raises(InvalidInputError):
        plan_pretile(SCENE, minzoom, maxzoom)


def test_chunks_cover_each_planned_tile_once_and_only_those() -> None:
    plan = plan_pretile(SCENE, 6, 12)
    every = list(chunks(SCENE, plan))

    assert len(every) == count_chunks(SCENE, plan)
    tiles = [t for c in every for t in c.tiles()]
    assert len(tiles) == len(set(tiles)) == plan["total"]
    for entry in plan["zooms"]:
        assert sum(t.z == entry["zoom"] for t in tiles) == (entry["tiles"] if entry["tiled"] else 0)
    assert all(t.intersects(SCENE) for t in tiles)
    assert all(c.size == len(list(c.tiles())) <= CHUNK * CHUNK for c in every)


def test_chunks_resume_from_any_position() -> None:
    plan = plan_pretile(SCENE, 6, 12)
    every = list(chunks(SCENE, plan))
    first_of_zoom_11 = next(i for i, c in enumerate(every) if c.z == 11)

    for start in (0, 1, first_of_zoom_11 - 1, first_of_zoom_11, len(every) - 1, len(every)):
        assert list(chunks(SCENE, plan, start)) == every[start:], start


def test_a_chunk_lists_its_tiles_row_by_row() -> None:
    chunk = Chunk(5, 2, 3, 3, 4)

    assert chunk.size == 4
    assert list(chunk.tiles()) == [
        TileAddress(5, 2, 3),
        TileAddress(5, 3, 3),
        TileAddress(5, 2, 4),
        TileAddress(5, 3, 4),
    ]


def _counters(client: redis.Redis) -> PretileCounters:
    return PretileCounters(client, str(uuid.uuid4()), ttl_s=60)


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    yield client
    for key in client.scan_iter("mapsvc:pretile:*"):
        client.delete(key)
    client.close()


@pytest.fixture
def counters(client: redis.Redis) -> PretileCounters:
    return _counters(client)


def test_the_counters_count_each_chunk_once_and_end_the_run_at_its_total(
    counters: PretileCounters,
) -> None:
    plan = plan_pretile(WORLD, 1, 3)  # one chunk of 4 tiles, one of 16
    first, second = chunks(WORLD, plan)
    counters.start(plan, {"coverage": None})

    assert [counters.attempt(first), counters.attempt(first)] == [1, 2]
    assert counters.add(first, {"rendered": 3, "empty": 1}) == (False, 0)
    assert counters.add(first, {"rendered": 3, "empty": 1}) == (False, 0)  # delivered again
    failed = [TileAddress(2, 3, 3), TileAddress(2, 2, 3)]
    assert counters.add(second, {"rendered": 8, "skipped": 6}, "boom", failed=failed) == (True, 2)

    summary = counters.summary()
    assert summary["zooms"] == [
        {"zoom": 1, "tiles": 4, "rendered": 3, "skipped": 0, "empty": 1, "failed": 0,
         "resumed": 0, "errors": 0},
        {"zoom": 2, "tiles": 16, "rendered": 8, "skipped": 6, "empty": 0, "failed": 2,
         "resumed": 0, "errors": 1},
    ]  # fmt: skip
    assert (summary["rendered"], summary["skipped"], summary["empty"]) == (11, 6, 1)
    assert (summary["done"], summary["failed"], summary["remaining"]) == (17, 2, 1)
    assert (summary["first_error"], summary["plan"]) == ("boom", plan)
    assert counters.failed_tiles(10) == ["2/3/3", "2/2/3"]
    assert counters.failed_tiles(1) == ["2/3/3"]
    text, progress = counters.progress_line(2)
    assert text.startswith("Zoom 2: 14/16 tiles, ")
    assert progress == 19 / 20
    assert 0 < counters.client.ttl(counters.key) <= 60
    assert 0 < counters.client.ttl(f"{counters.key}:failed") <= 60
    counters.end()
    ended = counters.summary()["seconds"]
    time.sleep(0.05)
    assert counters.summary()["seconds"] == ended  # the rate of a run ended stays


def test_a_resumed_run_counts_the_chunks_done_clean_and_makes_the_others(
    client: redis.Redis,
) -> None:
    plan = plan_pretile(WORLD, 2, 4)  # zoom 2: one chunk of 16 tiles; zoom 3: one of 64
    first, second = chunks(WORLD, plan)
    old = _counters(client)
    old.start(plan, {"coverage": {"bounds": WORLD, "geometry": None, "buffer": 0}})
    old.add(first, {"rendered": 16})
    old.add(second, {"rendered": 10}, "boom", failed=list(second.tiles())[10:])

    new = _counters(client)
    assert new.resume(old) == 16
    assert new.run() == old.run()
    assert new.done_chunks([first, second]) == [True, False]
    summary = new.summary()
    assert (summary["plan"], summary["done"], summary["resumed"]) == (plan, 16, 16)
    assert summary["remaining"] == 64
    assert summary["resumed_of"] == old.job_id
    # the chunk made again completes the run; counts = plan
    assert new.add(second, {"rendered": 54, "skipped": 10}) == (True, 0)
    summary = new.summary()
    assert (summary["done"], summary["failed"], summary["remaining"]) == (80, 0, 0)


def test_a_cancelled_chunk_is_made_again_by_a_resume(client: redis.Redis) -> None:
    plan = plan_pretile(WORLD, 2, 4)
    first, second = chunks(WORLD, plan)
    old = _counters(client)
    old.start(plan, {"coverage": None})
    old.add(first, {"rendered": 16})
    old.add(second, {"cancelled": 64})
    old.add_rest(0)

    new = _counters(client)
    assert new.resume(old) == 16
    assert new.done_chunks([first, second]) == [True, False]


def test_a_run_whose_progress_expired_cannot_be_resumed(client: redis.Redis) -> None:
    with pytest.raises(UnprocessableError, match="no longer kept"):
        _counters(client).resume(_counters(client))


def test_run_slots_hold_at_most_their_number_of_runs(client: redis.Redis) -> None:
    store = JobStore(client, Settings())
    slots = RunSlots(store, most=1, ttl_s=60)
    client.delete(RunSlots.KEY)
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    for job_id in (first, second):
        store.create(job_id, "pretile", {})
    try:
        assert slots.take(first) is True
        assert slots.take(second) is False
        assert slots.take(first) is True  # renewed
        assert slots.going() == 1
        store.finish(first, "failed", "gone")  # ended without freeing its place
        assert slots.take(second) is True
        slots.free(second)
        assert slots.going() == 0
        assert RunSlots(store, most=0, ttl_s=60).take(first) is True  # no limit
    finally:
        client.delete(RunSlots.KEY)


def test_a_run_ended_before_its_start_frees_its_layer_and_place(client: redis.Redis) -> None:
    store = JobStore(client, Settings())
    job_id, other = str(uuid.uuid4()), str(uuid.uuid4())
    store.create(job_id, "pretile", Pretile("free-run-style", "en", 0, 1, False, False).params())
    store.create(other, "export", {"style": "free-run-style"})
    lock = LayerLock(store, "free-run-style", 60)
    slots = RunSlots(store, most=2, ttl_s=60)
    try:
        assert lock.acquire(job_id) is None
        assert slots.take(job_id)
        free_run(store, store.get(other))  # type: ignore[arg-type]  # another kind: nothing
        assert client.get(lock.key) == job_id
        free_run(store, store.get(job_id))  # type: ignore[arg-type]
        assert client.get(lock.key) is None
        assert client.zscore(RunSlots.KEY, job_id) is None
    finally:
        client.delete(lock.key, f"mapsvc:job:{job_id}", f"mapsvc:job:{other}")
        client.zrem(RunSlots.KEY, job_id)


def test_a_run_cancelled_while_it_goes_frees_its_layer_and_place_and_only_its_own(
    client: redis.Redis,
) -> None:
    store = JobStore(client, Settings())
    old, new = str(uuid.uuid4()), str(uuid.uuid4())
    for job_id in (old, new):
        store.create(job_id, "pretile", Pretile("cancel-style", "en", 0, 1, False, False).params())
    lock = LayerLock(store, "cancel-style", 60)
    slots = RunSlots(store, most=2, ttl_s=60)
    try:
        assert lock.acquire(old) is None
        assert slots.take(old)
        store.request_cancel(old)  # what the cancel does, then it frees the run
        free_run(store, store.get(old))  # type: ignore[arg-type]
        assert client.get(lock.key) is None
        assert client.zscore(RunSlots.KEY, old) is None
        # a new run takes the layer while the old one's chunks drain; the old one's steps and
        # its end keep or free nothing of it
        assert lock.acquire(new) is None
        lock.refresh(old)
        lock.release(old)
        free_run(store, store.get(old))  # type: ignore[arg-type]
        assert client.get(lock.key) == new
    finally:
        client.delete(lock.key, *(f"mapsvc:job:{j}" for j in (old, new)))
        client.zrem(RunSlots.KEY, old, new)


def test_a_start_cancelled_as_it_takes_the_lock_gives_it_back(client: redis.Redis) -> None:
    """The cancel freed the layer before the job's start took it: the start gives it back and
    ends the job cancelled (not as a conflict with a run that took the layer since)."""
    store = JobStore(client, Settings())
    job_id, other = str(uuid.uuid4()), str(uuid.uuid4())
    for name in (job_id, other):
        store.create(
            name, "pretile", Pretile("start-cancel-style", "en", 0, 1, False, False).params()
        )
    lock = LayerLock(store, "start-cancel-style", 60)
    stores = SimpleNamespace(pick=lambda s3: None)
    runner = PretileRunner(store, None, stores, max_tiles=100, lock_ttl_s=60)  # type: ignore[arg-type]
    job = PretileJob(job_id, "start-cancel-style", "en", False, False)
    coverage = Coverage.box(SCENE).to_json()

    def send(*args: object) -> None:
        raise AssertionError("a cancelled run sends no chunk")

    store.request_cancel(job_id)
    try:
        with pytest.raises(JobCancelledError):
            runner.start(JobReporter(store, job_id), job, 8, 10, send, coverage)
        assert client.get(lock.key) is None
        assert lock.acquire(other) is None  # a new run of the layer
        with pytest.raises(JobCancelledError):
            runner.start(JobReporter(store, job_id), job, 8, 10, send, coverage)
        assert client.get(lock.key) == other
    finally:
        client.delete(lock.key, *(f"mapsvc:job:{j}" for j in (job_id, other)))


def test_a_resume_takes_the_old_runs_lock_over_in_one_step(client: redis.Redis) -> None:
    store = JobStore(client, Settings())
    old, new, late = (str(uuid.uuid4()) for _ in range(3))
    store.create(
        old, "pretile", Pretile("take-over-style", "en", 0, 1, False, False).params()
    )  # running (no outcome)
    lock = LayerLock(store, "take-over-style", 60)
    try:
        assert lock.acquire(old) is None
        assert lock.acquire(new) == old  # a run going holds it
        assert lock.take_over(old, new) is None
        assert client.get(lock.key) == new
        assert lock.take_over(old, late) == new  # the race lost: the winner named
        assert client.get(lock.key) == new
    finally:
        client.delete(lock.key, f"mapsvc:job:{old}")


def test_a_run_into_a_disk_short_of_space_stops_with_a_clear_error(
    client: redis.Redis, tmp_path: Path
) -> None:
    """A run into the disk cache whose disk has less free than it keeps
    (``MAPSVC_MIN_FREE_DISK_BYTES``) renders nothing, stops at its first chunk, frees its layer
    and fails saying why; nothing is written."""
    store = JobStore(client, Settings())
    job_id, style = str(uuid.uuid4()), "disk-short-style"
    store.create(job_id, "pretile", Pretile(style, "en", 0, 1, False, False).params())
    cache = FileTileStore(tmp_path / "rtile")
    stores = SimpleNamespace(pick=lambda s3: cache)
    runner = PretileRunner(
        store,
        None,  # type: ignore[arg-type]  # (nothing is drawn)
        stores,  # type: ignore[arg-type]
        max_tiles=1000,
        lock_ttl_s=60,
        keep_free=shutil.disk_usage(tmp_path).free + 2**40,
    )
    job = PretileJob(job_id, style, "en", False, False)
    steps: deque[tuple[Any, ...]] = deque()
    sent: deque[Chunk] = deque()
    try:
        area = Coverage.box(SCENE).to_json()
        runner.start(JobReporter(store, job_id), job, 8, 11, lambda *a: steps.append(a), area)
        while steps or sent:
            if sent:
                runner.render(job, sent.popleft())
                continue
            coverage, plan, start, tiles, _ = steps.popleft()
            runner.send(
                job,
                coverage,
                plan,
                start,
                tiles,
                send_chunk=lambda chunk, _: sent.append(chunk),
                send_next=lambda *a: steps.append(a),
            )
        record = store.get(job_id)
        assert record is not None
        assert record.outcome == "failed"
        assert record.error is not None
        assert "disk is almost full" in record.error["message"], record.error
        assert "MAPSVC_MIN_FREE_DISK_BYTES" in record.error["message"]
        assert client.get(LayerLock(store, style, 60).key) is None  # the layer is free
        assert not any(p.is_file() for p in tmp_path.rglob("*"))  # nothing written
    finally:
        client.delete(LayerLock(store, style, 60).key, f"mapsvc:job:{job_id}")
        client.zrem(RunSlots.KEY, job_id)
