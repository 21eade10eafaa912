"""Prometheus metrics: ``GET /metrics`` of a real ``mapsvc serve`` (two API processes) and the
real worker, read before and after some work; the files of several processes added up."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from shared import metrics
from shared.settings import Settings
from tests.checks import AUTH, assert_error
from tests.conftest import ROOT, free_port, serve_process
from tests.layers import RGB_ID, tile_url
from tests.providers import fakes

pytestmark = [pytest.mark.worker, pytest.mark.server]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

TILE = (10, 290, 442)  # in the Landsat scene
TILE_ROUTE = "/api-user/rtile/{style}/{lang}/{z}/{x}/{y}.png"


@pytest.fixture(scope="module")
def api(
    psettings: Settings,
    worker: subprocess.Popen[bytes],
    layers: None,
    vector_tables: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """``mapsvc serve`` with two API processes, providers at their fakes; its base URL."""
    mine = psettings.model_copy(update={"port": free_port(), "api_workers": 2})
    log = tmp_path_factory.mktemp("metrics") / "serve.log"
    with serve_process(mine, log) as base:
        yield base


def scrape(base: str) -> Samples:
    r = httpx.get(f"{base}/metrics", headers=AUTH, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(r.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def label_values(samples: Samples, name: str, label: str) -> set[str]:
    return {dict(labels)[label] for sample, labels in samples if sample == name}


def test_metrics_go_up_by_exactly_what_was_done(
    api: str, settings: Settings, psettings: Settings
) -> None:
    (settings.dirs.rtile / RGB_ID / "en" / "10" / "290" / "442.png").unlink(missing_ok=True)
    http = httpx.Client(base_url=api, headers=AUTH, timeout=60)
    get, post = http.get, http.post
    before = scrape(api)

    # a tile rendered (a miss), then read from the cache (a hit); a bad key on it: refused
    # before routing, still labelled with its route
    for cache in ("MISS", "HIT"):
        r = get(tile_url(RGB_ID, *TILE))
        assert r.status_code == 200
        assert r.headers["x-cache"] == cache
    bad_key = {"Authorization": "ApiKey msk_" + "0" * 40}
    assert get(tile_url(RGB_ID, *TILE), headers=bad_key).status_code == 401
    # GeoJSON past its cache, a provider call, then one whose provider fails (with retries)
    assert get("/api-user/geojson/public.test_lines?nocache=1").status_code == 200
    assert get("/api-user/geocode", params={"q": f"Kyiv {uuid.uuid4()}"}).status_code == 200
    fakes.MODE["nominatim"] = "500"
    try:
        assert get("/api-user/geocode", params={"q": f"Lviv {uuid.uuid4()}"}).status_code == 502
    finally:
        fakes.MODE.clear()
    # a job that succeeds, one that fails, and a path no route has
    assert post("/api/v1/diag/probe?steps=2&delay_ms=10").status_code == 200
    assert post("/api/v1/diag/probe?steps=2&delay_ms=10&fail_at=1").status_code == 422
    assert get(f"/api-user/nothing-here/{RGB_ID}").status_code == 404
    # a job that fans out (pre-tiling's chunks end it): counted once, when its last chunk ends
    pretiled = get(f"/api-user/gis-layer-pretile/{RGB_ID}?minzoom=3&maxzoom=5&nocache=1")
    assert pretiled.status_code == 200, pretiled.text

    after = scrape(api)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    requests = "mapsvc_http_requests_total"
    assert delta(requests, route=TILE_ROUTE, method="GET", status="2xx") == 2
    assert delta(requests, route=TILE_ROUTE, method="GET", status="4xx") == 1
    assert delta(requests, route="/api-user/geojson/{layer}", method="GET", status="2xx") == 1
    assert delta(requests, route="/api-user/geocode", method="GET", status="2xx") == 1
    assert delta(requests, route="/api-user/geocode", method="GET", status="5xx") == 1
    assert delta(requests, route="/api/v1/diag/probe", method="POST", status="2xx") == 1
    assert delta(requests, route="/api/v1/diag/probe", method="POST", status="4xx") == 1
    assert delta(requests, route="unmatched", method="GET", status="4xx") == 1
    seconds = "mapsvc_http_request_duration_seconds"
    tile_labels = {"route": TILE_ROUTE, "method": "GET", "status": "2xx"}
    assert delta(f"{seconds}_count", **tile_labels) == 2
    assert delta(f"{seconds}_bucket", **tile_labels, le="+Inf") == 2
    assert delta(f"{seconds}_sum", **tile_labels) > 0
    # labels name route templates, never what a request asked for
    routes = label_values(after, requests, "route")
    assert TILE_ROUTE in routes
    assert not [route for route in routes if RGB_ID in route or "nothing-here" in route]
    statuses = label_values(after, requests, "status")
    assert {"2xx", "4xx", "5xx"} <= statuses <= {"1xx", "2xx", "3xx", "4xx", "5xx"}

    tiles = "mapsvc_tile_cache_requests_total"
    assert delta(tiles, layer=RGB_ID, result="miss") == 1
    assert delta(tiles, layer=RGB_ID, result="hit") == 1
    # rendered in a render process of an API process, and by the worker's pre-tiling: the
    # files of every process count
    rendered = 1 + pretiled.json()["rendered"]
    assert delta("mapsvc_render_duration_seconds_count", layer=RGB_ID) == rendered
    assert value(after, "mapsvc_render_queue_length") == 0
    assert delta("mapsvc_vector_query_duration_seconds_count", kind="geojson") == 1

    attempts = 1 + 1 + psettings.providers.retries  # the call, then the failing one's attempts
    provider = "mapsvc_provider_request_duration_seconds_count"
    assert delta(provider, provider="nominatim") == attempts
    errors = "mapsvc_provider_errors_total"
    assert delta(errors, provider="nominatim", error="upstream-error") == 1

    # the job counters come from the worker's processes
    assert delta("mapsvc_jobs_started_total", kind="probe") == 2
    assert delta("mapsvc_jobs_finished_total", kind="probe", outcome="succeeded") == 1
    assert delta("mapsvc_jobs_finished_total", kind="probe", outcome="failed") == 1
    assert delta("mapsvc_job_duration_seconds_count", kind="probe", outcome="succeeded") == 1
    assert delta("mapsvc_jobs_started_total", kind="pretile") == 1
    assert delta("mapsvc_jobs_finished_total", kind="pretile", outcome="succeeded") == 1
    assert delta("mapsvc_job_duration_seconds_count", kind="pretile", outcome="succeeded") == 1
    queues = label_values(after, "mapsvc_celery_queue_length", "queue")
    assert queues == {"default", "raster", "tiles"}


@pytest.mark.parametrize("prefix", ["", "/api-user", "/api/v1"])
def test_metrics_are_for_operators(api: str, prefix: str) -> None:
    r = httpx.get(f"{api}{prefix}/metrics")
    assert r.status_code == 401
    assert_error(r.json(), "unauthorized")
    assert "Bearer" in r.headers["www-authenticate"]

    def key(role: str) -> dict[str, str]:
        made = httpx.post(
            f"{api}/api-user/api-keys", json={"name": "metrics", "role": role}, headers=AUTH
        )
        assert made.status_code == 201, made.text
        return {"Authorization": f"Bearer {made.json()['key']}"}

    r = httpx.get(f"{api}{prefix}/metrics", headers=key("reader"))
    assert r.status_code == 403
    assert_error(r.json(), "forbidden")
    r = httpx.get(f"{api}{prefix}/metrics", headers=key("operator"))
    assert r.status_code == 200
    assert "# TYPE mapsvc_http_requests_total counter" in r.text


def test_celery_queue_length_counts_every_priority(rdb: redis.Redis) -> None:
    queue = f"metrics-test-{uuid.uuid4().hex}"
    keys = [queue, f"{queue}\x06\x169"]
    rdb.rpush(keys[0], "a", "b")
    rdb.rpush(keys[1], "c")
    try:
        (family,) = metrics.CeleryQueues(rdb, [queue, "empty-" + queue]).collect()
        assert family.name == "mapsvc_celery_queue_length"
        assert {s.labels["queue"]: s.value for s in family.samples} == {
            queue: 3,
            "empty-" + queue: 0,
        }
    finally:
        rdb.delete(*keys)


def test_files_of_processes_add_up_and_those_of_the_dead_are_dropped(tmp_path: Path) -> None:
    here = metrics.prepare_dir(tmp_path)
    assert here.parent == tmp_path  # a folder per host
    count = (
        "from shared import metrics\n"
        "metrics.count_tile_lookup('a', True)\n"
        "metrics.count_tile_lookup('a', False, zoom=7)\n"
    )
    for _ in range(2):
        env = os.environ | {metrics.ENV: str(here)}
        subprocess.run([sys.executable, "-c", count], env=env, cwd=ROOT, check=True)
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in metrics.MetricFiles(tmp_path).collect()
        for sample in family.samples
    }
    tiles = "mapsvc_tile_cache_requests_total"
    assert value(samples, tiles, layer="a", result="hit") == 2
    assert value(samples, tiles, layer="a", zoom="7", result="miss") == 2
    assert value(samples, tiles, layer="a", result="miss") == 0
    # the processes have ended: the next command to start drops their files
    assert list(here.glob("*.db"))
    metrics.prepare_dir(tmp_path)
    assert not list(here.glob("*.db"))
