"""Redis stopped and started again (its AOF read back) mid pre-tiling: the API answers 503 while
it is down and recovers by itself; the job ends with a final line; no tile is half-written."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
import pytest
import redis
from sqlalchemy import create_engine

from shared.auth.authenticator import LOCAL_S
from shared.auth.keys import create_key
from shared.redis_clients import sync_client
from shared.settings import Settings
from shared.tiles.styles import read_style
from tests.checks import AUTH, assert_error
from tests.faults.conftest import STALL_S, Api
from tests.faults.harness import (
    ServiceProcess,
    api_answers,
    assert_png,
    cached_tiles,
    planned_tiles,
)
from tests.layers import tile_url
from tests.services import RedisServer, poll
from tests.sse import read_job_lines

pytestmark = [pytest.mark.worker, pytest.mark.server]

#: zooms 8-12 of the Landsat scene: 977 tiles, several seconds on two worker processes
QUERY = "minzoom=8&maxzoom=13"
#: a job of a few milliseconds, waited for (a heavy endpoint's reply)
PROBE = "/api-user/diag/probe?steps=1&delay_ms=1"
#: the longest a request may take to answer while Redis is down
QUICK_S = 5.0


def timed_get(client: httpx.Client, path: str) -> tuple[httpx.Response, float]:
    t0 = time.monotonic()
    r = client.get(path)
    return r, time.monotonic() - t0


def test_redis_restarted_mid_pretile(
    fault_api: Api,
    fault_redis: RedisServer,
    fault_settings: Settings,
    fault_rdb: redis.Redis,
    rgb_layer: str,
    scene: str,
    start_worker: Callable[[], ServiceProcess],
) -> None:
    worker = start_worker()
    api = fault_api.client
    engine = create_engine(fault_settings.database_url)
    key = create_key(engine, "faults-redis", "reader")[1]
    engine.dispose()
    as_reader = {"Authorization": f"Bearer {key}"}
    keyed = tile_url(rgb_layer, 9, 145, 220)
    assert api.get(keyed, headers=as_reader).status_code == 200  # its look-up kept in Redis
    # a job waited for: its connection goes back to the pool of event streams and waits
    assert api.post(PROBE).status_code == 200
    plan = api.get(f"/api-user/gis-layer-pretile/{scene}?dryrun=1&{QUERY}").json()
    job_id = api.get(f"/api-user/gis-layer-pretile/{scene}?{QUERY}&async=1").json()["id"]
    # chunks are rendering, far from the end (read every 0.2 s: the stop falls anywhere between
    # two chunks, not just after one ends)
    poll(lambda: (fault_api.job(job_id)["progress"] or 0) >= 0.05, 30, "progress", step=0.2)
    fault_redis.stop()
    try:
        needs_redis = [
            f"/api-user/jobs/{job_id}",
            "/api-user/jobs",
            f"/api-user/jobs/{job_id}/events",
            f"/api-user/gis-layer-pretile/{rgb_layer}?minzoom=8&maxzoom=9&async=1",
        ]
        for path in needs_redis:
            r, took = timed_get(api, path)
            assert r.status_code == 503, (path, r.text)
            assert assert_error(r.json(), "unavailable")["detail"] == {"service": "Redis"}, path
            assert took < QUICK_S, (path, took)
            assert int(r.headers["retry-after"]) >= 1
        # a key's look-up is kept in Redis (and a moment, LOCAL_S, in the process): past that
        # moment a request with a key needs Redis too
        time.sleep(LOCAL_S)
        r = api.get(keyed, headers=as_reader)
        assert r.status_code == 503, r.text
        assert assert_error(r.json(), "unavailable")["detail"] == {"service": "Redis"}
        r, took = timed_get(api, "/api-user/ready")
        assert r.status_code == 503
        checks = assert_error(r.json(), "not-ready")["detail"]["checks"]
        assert checks["redis"]["ok"] is False
        assert took < QUICK_S
        # raster tiles need no Redis: they still come, rendered (the rate limits are off)
        r, took = timed_get(api, tile_url(rgb_layer, 9, 144, 220))
        assert (r.status_code, r.headers.get("x-cache")) == (200, "MISS"), r.text
        assert "x-tile-empty" not in r.headers
        assert_png(r.content, "tile served while Redis is down")
        # the job's processes meet the outage too: they wait for Redis to come back
        poll(lambda: "Connection to broker lost" in worker.output(), 10, "the worker's notice")
    finally:
        fault_redis.start()
    # no process of the service is restarted: the same API and worker answer again
    # the worker answers pings again once its consumer is back: the chunks that ran on through
    # the outage end first (worker_cancel_long_running_tasks_on_connection_loss is off), so
    # this waits as long as the job may (the bound below)
    ready_again = api_answers(fault_api.base, "/api-user/ready")
    try:
        fault_api.process.wait_for(ready_again, STALL_S + 60, "ready again")
    except AssertionError:
        print(httpx.get(f"{fault_api.base}/api-user/ready", headers=AUTH, timeout=5).text)
        print(worker.tail())
        raise
    assert api.get(f"/api-user/jobs/{job_id}").status_code == 200  # the AOF kept the job
    assert api.get(keyed, headers=as_reader).status_code == 200
    job = fault_api.wait_job(job_id, timeout=STALL_S + 60)
    assert fault_api.process.alive()
    assert worker.alive()
    # the tasks running as Redis stopped waited for it: none failed
    assert "raised unexpected" not in worker.output(), worker.tail()
    # an event stream, then a wait, on the pool's connections that Redis closed as it stopped
    texts = [frame.data for frame in read_job_lines(fault_api.base, job_id, timeout=30)]
    assert api.post(PROBE).status_code == 200
    final = texts[-1]
    assert final == "Finish:success" or (final or "").startswith("Finish:error: "), texts[-5:]
    assert sum(t is not None and t.startswith("Finish:") for t in texts) == 1
    bounds = read_style(fault_settings.dirs.mapnik, scene).footprint
    stored = cached_tiles(fault_settings, scene)  # every tile whole, no temporary file
    if final == "Finish:success":
        assert job["state"] == "succeeded", job
        result = job["result"]
        assert result["rendered"] + result["skipped"] == plan["total"]
        assert [(z["zoom"], z["rendered"] + z["skipped"]) for z in result["zooms"]] == [
            (z["zoom"], z["tiles"]) for z in plan["zooms"]
        ]
        assert stored == planned_tiles(plan, bounds)
    else:
        # Celery's Redis transport hands a message out (BRPOP), then files it as unacked: one
        # handed out as Redis stops is lost. The run stalls; the watchdog ends it, saying so.
        assert job["state"] == "failed", job
        assert job["error"]["message"] in final
        assert "the job stalled" in final
        assert stored <= planned_tiles(plan, bounds)


def test_a_worker_command_waits_for_redis_to_come_back(fault_redis: RedisServer) -> None:
    patient = sync_client(fault_redis.url(), outage_s=30)  # a worker's (workers/_job.py)
    quick = sync_client(fault_redis.url())  # the API's
    brief = sync_client(fault_redis.url(), outage_s=1)
    assert patient.set("mapsvc:faults:kept", "1")
    assert quick.ping()
    assert brief.ping()
    fault_redis.stop()
    restart = threading.Timer(1.0, fault_redis.start)
    try:
        for client, bound in ((quick, QUICK_S), (brief, 1 + QUICK_S)):
            t0 = time.monotonic()
            with pytest.raises(redis.ConnectionError):
                client.get("mapsvc:faults:kept")
            assert time.monotonic() - t0 < bound
        restart.start()  # Redis is back in a second
        t0 = time.monotonic()
        assert patient.get("mapsvc:faults:kept") == "1"  # read back from the AOF
        assert 0.5 < time.monotonic() - t0 < 10
    finally:
        restart.cancel()
        if restart.is_alive():
            restart.join()
        if not fault_redis.answers():
            fault_redis.start()
    assert quick.get("mapsvc:faults:kept") == "1"  # the API's client reconnects by itself
