"""Hostile pre-tiling: plans past the ceiling, a second run of a layer, lazily sent chunks."""

from __future__ import annotations

import functools
import shutil
import subprocess
import threading
import time
import tracemalloc
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis
from starlette.testclient import TestClient

from api.app import create_app
from api.jobs import JobService
from shared.job_messages import Pretile
from shared.jobs import JobStore
from shared.seeding.plan import CHUNK, Chunk, chunks, count_chunks, plan_pretile
from shared.seeding.pretile import LayerLock, PretileCounters
from shared.settings import Settings
from tests.checks import assert_error
from tests.conftest import admin_client
from tests.jobs import job_lines, wait_state
from tests.layers import configure, stored_tiles

#: the whole grid, in degrees
WORLD = [-180.0, -85.0511287798066, 180.0, 85.0511287798066]
#: the tiles of zoom 24 over the world: what `minzoom=24&maxzoom=25` plans
Z24_WORLD = 4**24
#: the queue of the pre-tiling tasks (the Redis list of Celery's `tiles` queue)
TILES_QUEUE = "tiles"


def copy_layer(
    settings: Settings, rdb: redis.Redis, raster_dir: Path, source: str, name: str
) -> str:
    """A layer of its own (a copy of ``source``), so that no other test caches its tiles."""
    folder = raster_dir / "pretile-hostile"
    folder.mkdir(exist_ok=True)
    shutil.copyfile(raster_dir / "single" / source, folder / name)
    return configure(settings, rdb, f"pretile-hostile/{name}")


@pytest.fixture
def world(
    settings: Settings, rdb: redis.Redis, raster_dir: Path, request: pytest.FixtureRequest
) -> str:
    """A copy of the world image: its footprint is the whole grid."""
    return copy_layer(settings, rdb, raster_dir, "world.rgb.tif", f"{request.node.name[:40]}.tif")


@pytest.fixture
def scene(
    settings: Settings, rdb: redis.Redis, raster_dir: Path, request: pytest.FixtureRequest
) -> str:
    """A copy of the Landsat scene (a few hundred tiles at zooms 8-12)."""
    return copy_layer(settings, rdb, raster_dir, "RGB.byte.tif", f"{request.node.name[:40]}.tif")


def job_keys(rdb: redis.Redis) -> set[str]:
    return set(rdb.scan_iter("mapsvc:job:*")) | set(rdb.scan_iter("mapsvc:pretile*"))


def assert_still_answering(client: TestClient, style: str) -> None:
    assert client.get("/api-user/health").status_code == 200
    tile = client.get(f"/api-user/rtile/{style}/en/0/0/0.png")
    assert tile.status_code == 200
    assert tile.content.startswith(b"\x89PNG")


def assert_freed_at_once(rdb: redis.Redis, lock: str, job_id: str) -> None:
    """The lock no longer names ``job_id`` within a moment (the cancel released it; a start of
    the job running as it was cancelled may hold it for an instant before it stops)."""
    deadline = time.monotonic() + 3
    while rdb.get(lock) == job_id:
        assert time.monotonic() < deadline, "the lock outlived the cancel of its run"
        time.sleep(0.05)


def test_a_plan_above_the_ceiling_is_422_and_enqueues_nothing(
    client: TestClient, settings: Settings, rdb: redis.Redis, world: str
) -> None:
    keys, queued = job_keys(rdb), rdb.llen(TILES_QUEUE)
    r = client.get(f"/api-user/gis-layer-pretile/{world}?minzoom=24&maxzoom=25&async=1")
    assert r.status_code == 422
    error = assert_error(r.json(), "unprocessable")
    plan = error["detail"]["plan"]
    assert (plan["total"], plan["ceiling"], plan["over_ceiling"]) == (Z24_WORLD, 4_000_000, True)
    assert plan["zooms"] == [{"zoom": 24, "tiles": Z24_WORLD, "tiled": True}]
    assert "minzoom" in error["message"]
    # nothing enqueued, recorded or locked; no tile written
    assert job_keys(rdb) == keys
    assert rdb.llen(TILES_QUEUE) == queued
    assert not rdb.exists(f"mapsvc:pretile-lock:{world}")
    assert stored_tiles(settings, world) == set()
    assert_still_answering(client, world)


def test_dryrun_above_the_ceiling_answers_the_plan(client: TestClient, world: str) -> None:
    r = client.get(f"/api-user/gis-layer-pretile/{world}?minzoom=24&maxzoom=25&dryrun=1")
    assert r.status_code == 200
    plan = r.json()
    assert (plan["total"], plan["over_ceiling"], plan["ceiling"]) == (Z24_WORLD, True, 4_000_000)
    # below the ceiling the spec's cap and "first zoom whole" rule still hold
    below = client.get(f"/api-user/gis-layer-pretile/{world}?minzoom=9&maxzoom=11&dryrun=1").json()
    assert (below["total"], below["cut"], below["over_ceiling"]) == (4**9, [10], False)


def test_the_ceiling_is_a_setting(settings: Settings, world: str) -> None:
    narrow = settings.model_copy(update={"pretile_max_tiles": 1000})
    with admin_client(create_app(narrow), raise_server_exceptions=False) as tc:
        r = tc.get(f"/api-user/gis-layer-pretile/{world}?minzoom=5&maxzoom=7")
        assert r.status_code == 422
        plan = assert_error(r.json(), "unprocessable")["detail"]["plan"]
        assert (plan["total"], plan["ceiling"]) == (4**5 + 4**6, 1000)
        small = tc.get(f"/api-user/gis-layer-pretile/{world}?minzoom=3&maxzoom=5&dryrun=1")
        assert (small.json()["total"], small.json()["over_ceiling"]) == (4**3 + 4**4, False)


@pytest.mark.worker
def test_the_task_refuses_a_plan_above_the_ceiling_too(
    client: TestClient,
    settings: Settings,
    rdb: redis.Redis,
    world: str,
    worker: subprocess.Popen[bytes],
) -> None:
    """A job sent around the API (straight to the queue) fails before it sends a chunk."""
    jobs: JobService = client.app.state.services.jobs  # type: ignore[attr-defined]
    params = {"style": world, "lang": "en", "minzoom": 24, "maxzoom": 25}
    params |= {"refresh": False, "s3": False}
    assert client.portal is not None
    job_id = client.portal.call(functools.partial(jobs.enqueue, "pretile", "tiles.pretile", params))
    done = wait_state(client, job_id, timeout=60)
    assert done["state"] == "failed"
    assert done["error"]["code"] == "unprocessable"
    assert done["error"]["detail"]["plan"]["total"] == Z24_WORLD
    assert not rdb.exists(f"mapsvc:pretile:{job_id}")  # no run started, no chunk sent
    assert stored_tiles(settings, world) == set()
    assert_still_answering(client, world)


@pytest.mark.worker
def test_a_second_run_of_a_layer_is_409_whatever_its_lang(
    client: TestClient,
    settings: Settings,
    rdb: redis.Redis,
    scene: str,
    worker: subprocess.Popen[bytes],
) -> None:
    first = client.get(f"/api-user/gis-layer-pretile/{scene}?minzoom=8&maxzoom=13&async=1")
    assert first.status_code == 202
    job_id = first.json()["id"]
    keys = job_keys(rdb)
    for query in ("lang=fr", "lang=de&minzoom=9&maxzoom=10&nocache=1", "minzoom=8&maxzoom=13"):
        r = client.get(f"/api-user/gis-layer-pretile/{scene}?{query}&async=1")
        assert r.status_code == 409, query
        error = assert_error(r.json(), "conflict")
        assert error["detail"]["job_id"] == job_id
        assert error["detail"]["links"]["self"] == f"/api-user/jobs/{job_id}"
        assert job_id in error["message"]
    # no other job recorded (the first one writes its own keys as it goes, and names itself
    # the layer's last run)
    new, last = job_keys(rdb) - keys, f"mapsvc:pretile-last:{scene}"
    if last in new:  # (read after the keys: the run may name itself meanwhile)
        assert rdb.get(last) == job_id
        new.discard(last)
    assert {k for k in new if job_id not in k} == set()
    assert_still_answering(client, scene)
    # the run ends (here cancelled): the layer is free at once
    assert client.delete(f"/api-user/jobs/{job_id}").status_code in (200, 202)
    assert wait_state(client, job_id, timeout=60)["state"] == "cancelled"
    again = client.get(f"/api-user/gis-layer-pretile/{scene}?minzoom=8&maxzoom=10&lang=fr")
    assert again.status_code == 200, again.text
    assert again.json()["rendered"] == 6 + 20
    # a run that succeeded frees it too
    third = client.get(f"/api-user/gis-layer-pretile/{scene}?minzoom=8&maxzoom=10&lang=fr")
    assert third.status_code == 200, third.text
    assert (third.json()["rendered"], third.json()["skipped"]) == (0, 26)
    assert not rdb.exists(f"mapsvc:pretile-lock:{scene}")


@pytest.mark.worker
def test_two_concurrent_requests_start_one_run(
    client: TestClient, rdb: redis.Redis, scene: str, worker: subprocess.Popen[bytes]
) -> None:
    barrier = threading.Barrier(2)

    def request(lang: str) -> httpx.Response:
        barrier.wait()
        return client.get(
            f"/api-user/gis-layer-pretile/{scene}?minzoom=8&maxzoom=13&lang={lang}&async=1"
        )

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(request, ["en", "fr"]))
    assert sorted(r.status_code for r in answers) == [202, 409]
    started = next(r for r in answers if r.status_code == 202).json()["id"]
    refused = next(r for r in answers if r.status_code == 409)
    assert assert_error(refused.json(), "conflict")["detail"]["job_id"] == started
    lock = f"mapsvc:pretile-lock:{scene}"
    assert rdb.get(lock) == started
    assert client.delete(f"/api-user/jobs/{started}").status_code in (200, 202)
    # a cancelled run frees its layer at once, not once its queued chunks have drained
    assert_freed_at_once(rdb, lock, started)
    assert wait_state(client, started, timeout=60)["state"] == "cancelled"
    assert rdb.get(lock) != started


def test_a_run_revoked_before_the_api_reads_its_state_frees_its_layer(
    client: TestClient, rdb: redis.Redis, scene: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker holding the queued start of a run marks it revoked as the cancel's broadcast
    reaches it (Celery does, for a task it has not started), which may be before the cancel
    reads the job's state: the job, which no worker will start, ends cancelled, and its layer
    is free at once."""
    jobs: JobService = client.app.state.services.jobs  # type: ignore[attr-defined]
    celery = jobs.celery
    sent: list[str] = []

    def held(name: str, *, task_id: str, **options: object) -> None:
        sent.append(task_id)  # a worker holds it, not started yet

    def revoke_seen_at_once(task_id: str, **options: object) -> None:
        assert celery.backend.get_state(task_id) == "PENDING"
        celery.backend.mark_as_revoked(task_id, reason="revoked")  # what that worker does

    monkeypatch.setattr(celery, "send_task", held)
    monkeypatch.setattr(celery.control, "revoke", revoke_seen_at_once)
    r = client.get(f"/api-user/gis-layer-pretile/{scene}?minzoom=8&maxzoom=13&async=1")
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert sent == [job_id]
    lock = f"mapsvc:pretile-lock:{scene}"
    assert rdb.get(lock) == job_id
    cancelled = client.delete(f"/api-user/jobs/{job_id}")
    assert (cancelled.status_code, cancelled.json()["state"]) == (200, "cancelled")
    assert job_lines(rdb, job_id) == ["Finish:cancelled"]
    assert not rdb.exists(lock)


@pytest.mark.worker
def test_a_lock_of_an_ended_or_vanished_job_does_not_block(
    client: TestClient,
    settings: Settings,
    rdb: redis.Redis,
    scene: str,
    worker: subprocess.Popen[bytes],
) -> None:
    """A run ended by someone else (a watchdog, the API) or lost frees its layer."""
    store = JobStore(rdb, settings)
    lock = LayerLock(store, scene, settings.jobs.time_limit_s)
    stalled = str(uuid.uuid4())
    store.create(stalled, "pretile", Pretile(scene, "en", 0, 1, False, False).params())
    assert lock.acquire(stalled) is None
    r = client.get(f"/api-user/gis-layer-pretile/{scene}?minzoom=8&maxzoom=9")
    assert r.status_code == 409
    assert assert_error(r.json(), "conflict")["detail"]["job_id"] == stalled
    # a job sent around the API does not run beside it either
    jobs: JobService = client.app.state.services.jobs  # type: ignore[attr-defined]
    params = {"style": scene, "lang": "en", "minzoom": 8, "maxzoom": 9}
    params |= {"refresh": False, "s3": False}
    assert client.portal is not None
    around = client.portal.call(functools.partial(jobs.enqueue, "pretile", "tiles.pretile", params))
    done = wait_state(client, around, timeout=60)
    assert (done["state"], done["error"]["code"]) == ("failed", "conflict")
    assert done["error"]["detail"]["job_id"] == stalled
    assert rdb.get(lock.key) == stalled
    store.finish(stalled, "failed", "Finish:error: the job stalled")  # what a watchdog does
    r = client.get(f"/api-user/gis-layer-pretile/{scene}?minzoom=8&maxzoom=9")
    assert r.status_code == 200, r.text
    # a lock naming a job whose record is gone (expired), set long ago
    rdb.set(lock.key, str(uuid.uuid4()), ex=settings.jobs.time_limit_s - 60)
    r = client.get(f"/api-user/gis-layer-pretile/{scene}?minzoom=8&maxzoom=9")
    assert r.status_code == 200, r.text
    assert r.json()["skipped"] == 6
    assert not rdb.exists(lock.key)


def test_chunks_are_produced_lazily() -> None:
    """Iterating a plan of a million tiles (a chunk per ``CHUNK`` x ``CHUNK`` block) holds one
    chunk at a time."""
    plan = plan_pretile(WORLD, 10, 11, ceiling=4_000_000)
    assert plan["total"] == 4**10
    count = count_chunks(WORLD, plan)
    assert count == (2**10 // CHUNK) ** 2
    tracemalloc.start()
    try:
        seen = tiles = 0
        for chunk in chunks(WORLD, plan):
            seen += 1
            tiles += chunk.size
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (seen, tiles) == (count, plan["total"])
    assert peak < 64 * 1024  # a list of the chunks alone would take megabytes
    # resuming anywhere costs nothing and gives the same chunks
    last = 2**10 - CHUNK  # the bottom right block
    assert next(chunks(WORLD, plan, count - 1)) == Chunk(10, last, last, 1023, 1023)
    assert list(chunks(WORLD, plan, count)) == []
    small = plan_pretile([-10.0, -10.0, 10.0, 10.0], 3, 7)
    every = list(chunks([-10.0, -10.0, 10.0, 10.0], small))
    assert len(every) == count_chunks([-10.0, -10.0, 10.0, 10.0], small)
    for start in range(len(every) + 1):
        assert list(chunks([-10.0, -10.0, 10.0, 10.0], small, start)) == every[start:]


@pytest.mark.worker
def test_a_large_run_queues_a_few_batches_and_can_be_cancelled(
    client: TestClient,
    settings: Settings,
    rdb: redis.Redis,
    world: str,
    worker: subprocess.Popen[bytes],
) -> None:
    """65,536 tiles (a chunk per ``CHUNK`` x ``CHUNK`` block): the queue holds a couple of
    batches, not every chunk."""
    r = client.get(f"/api-user/gis-layer-pretile/{world}?minzoom=8&maxzoom=9&async=1")
    assert r.status_code == 202
    job_id = r.json()["id"]
    deadline = time.monotonic() + 60
    while not any("tiles/s" in line for line in job_lines(rdb, job_id)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    lengths = []
    for _ in range(40):
        lengths.append(rdb.llen(TILES_QUEUE))
        time.sleep(0.05)
    assert 0 < max(lengths) <= 2 * 256 + 4, lengths
    assert client.delete(f"/api-user/jobs/{job_id}").status_code == 202
    # the layer is free as the run is cancelled, before the chunks it queued have drained
    assert not rdb.exists(f"mapsvc:pretile-lock:{world}")
    done = wait_state(client, job_id, timeout=60)
    assert done["state"] == "cancelled"
    assert job_lines(rdb, job_id)[-1] == "Finish:cancelled"
    # the chunks never sent were counted as cancelled, so the run ended
    assert 0 < len(stored_tiles(settings, world)) < 4**8
    assert not rdb.exists(f"mapsvc:pretile-lock:{world}")
    deadline = time.monotonic() + 30
    while rdb.llen(TILES_QUEUE):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert_still_answering(client, world)


def test_a_chunk_of_an_expired_run_writes_no_key(settings: Settings, rdb: redis.Redis) -> None:
    counters = PretileCounters(rdb, str(uuid.uuid4()), settings.jobs.events_ttl_s)
    chunk = Chunk(3, 0, 0, 1, 1)
    assert counters.attempt(chunk) == 0
    assert counters.add(chunk, {"rendered": 4}) == (False, 0)
    assert rdb.keys(f"{counters.key}*") == []
