"""Hostile seeding (issue 25), as a caller with a key limited to some layers, a reader, or no
one: another layer's runs listed, cancelled or resumed; resumes racing each other; paces that
would hang a layer; pages of the runs going; expiry by a vector layer's alias; truncation and
expiry led out of the layer by symbolic links; a run's coverage drawn from a hidden layer; the
viewer's archive URL carrying the user's credentials to any route; the whole grid truncated.

Real worker, Redis and PostGIS, as the suite runs them (and Chromium for the viewer).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import struct
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
import redis
from starlette.testclient import TestClient

from api.app import create_app
from api.front import front_vector_cache
from api.routes.web import DIST
from shared.job_messages import Pretile
from shared.jobs import FINISH_CANCELLED, JobStore
from shared.seeding.coverage import Coverage
from shared.seeding.plan import plan_pretile
from shared.seeding.pretile import LayerLock, PretileCounters
from shared.settings import Settings
from tests.api.test_expiry import cached_vector_tiles
from tests.checks import ADMIN_KEY, assert_error
from tests.conftest import admin_client, served
from tests.jobs import wait_running, wait_state
from tests.layers import RGB, own_layer

MOUNTS = ("/api-user", "/api/v1")
PRETILE = "/api-user/gis-layer-pretile"
TEXT = {"Content-Type": "text/plain"}
#: a tile of the Landsat scene (zoom 9 column 145), and its neighbour
T9, T9_NEXT = "9/145/219", "9/146/219"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def layer(
    settings: Settings, rdb: redis.Redis, raster_dir: Path, request: pytest.FixtureRequest
) -> str:
    """A layer of the test's own (a copy of the Landsat scene)."""
    name = f"{request.node.name[:40]}.tif".replace("[", "_").replace("]", "_")
    return own_layer(settings, rdb, RGB, "seeding-attacks", name)


@pytest.fixture
def other(settings: Settings, rdb: redis.Redis, raster_dir: Path, layer: str) -> str:
    """Another layer: the one the caller may not touch."""
    return own_layer(settings, rdb, RGB, "seeding-attacks", f"other-{layer[-12:]}.tif")


def key_for(client: TestClient, role: str, layers: list[str]) -> dict[str, str]:
    """The headers of a new API key of ``role`` limited to ``layers``."""
    body = {"name": f"seeding-{uuid.uuid4().hex[:8]}", "role": role, "layers": layers}
    r = client.post("/api-user/api-keys", json=body)
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['key']}"}


def record_run(rdb: redis.Redis, settings: Settings, layer: str, *, running: bool = False) -> str:
    """A pre-tiling job recorded as the API records one, never sent to a worker: ``queued``
    (Celery knows nothing of it), or ``running`` (Celery's record of it says it started)."""
    job_id = str(uuid.uuid4())
    params = Pretile(layer, "en", 8, 9, False, False).params()
    JobStore(rdb, settings).create(job_id, "pretile", params, "someone-else", layer)
    if running:
        meta: dict[str, Any] = {"status": "STARTED", "result": None, "traceback": None}
        rdb.set(f"celery-task-meta-{job_id}", json.dumps({**meta, "task_id": job_id}), ex=600)
    time.sleep(0.01)  # the next one is created later: newest first is an order
    return job_id


def end_runs(rdb: redis.Redis, settings: Settings, *job_ids: str) -> None:
    store = JobStore(rdb, settings)
    for job_id in job_ids:
        store.finish(job_id, "cancelled", FINISH_CANCELLED)


def put_tiles(root: Path, style: str, names: list[str], lang: str = "en") -> dict[Path, bytes]:
    """Files standing for cached PNG tiles ``z/x/y`` of ``style``: their paths and bytes."""
    made = {}
    for name in names:
        path = root / style / lang / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"tile {style} {name}".encode())
        made[path] = path.read_bytes()
    return made


def finished(client: TestClient, answer: Any) -> dict[str, Any]:
    """The result of a job's answer (waited for when it is a 202)."""
    assert answer.status_code in (200, 202), answer.text
    if answer.status_code == 200:
        result: dict[str, Any] = answer.json()
        return result
    job = wait_state(client, answer.json()["id"], timeout=120)
    assert job["state"] == "succeeded", job
    done: dict[str, Any] = job["result"]
    return done


# -- the nginx front's kept answers ----------------------------------------------------------

#: a kept answer's header as nginx 1.9+ writes it on a 64-bit host: version 5, then valid_sec
_HEADER = struct.Struct("=Qq")
_LATER = 2**40


def nginx_entry(path: Path, uri: str) -> Path:
    """A file as nginx keeps an answer to ``uri`` (header, key line, answer) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    head = _HEADER.pack(5, _LATER) + bytes(320)
    path.write_bytes(head + f"\nKEY: {uri}|gzip|\n".encode() + b"HTTP/1.1 200 OK\r\n\r\nmvt")
    return path


def kept(front: Path, uri: str) -> Path:
    """Where nginx (``levels=1:2``) keeps the answer to ``uri`` in the folder ``front``."""
    name = hashlib.md5(uri.encode()).hexdigest()
    return nginx_entry(front / name[-1] / name[-3:-1] / name, uri)


def valid_sec(path: Path) -> int:
    """The ``valid_sec`` of a kept answer (0: expired by the API)."""
    return int(_HEADER.unpack(path.read_bytes()[: _HEADER.size])[1])


# -- another layer's runs ---------------------------------------------------------------------


def test_another_layers_runs_are_not_listed_cancelled_resumed_or_read(
    client: TestClient, settings: Settings, rdb: redis.Redis, layer: str, other: str
) -> None:
    mine, theirs = record_run(rdb, settings, layer), record_run(rdb, settings, other)
    operator = key_for(client, "operator", [layer])
    reader = key_for(client, "reader", [layer, other])
    try:
        for mount in MOUNTS:
            for query in ("", "?going=1&limit=200", "?offset=0&limit=200"):
                listed = client.get(f"{mount}/seeds{query}", headers=operator)
                assert listed.status_code == 200, listed.text
                ids = {seed["id"] for seed in listed.json()["seeds"]}
                assert mine in ids
                assert theirs not in listed.text
                assert other not in listed.text
            refused = [
                ("GET", f"/seeds?layer={other}"),
                ("GET", f"/seeds?layer={layer}&layer={other}"),
                ("DELETE", f"/seeds?layer={other}"),
                ("GET", f"/seeds/{theirs}"),
                ("DELETE", f"/seeds/{theirs}"),
                ("POST", f"/seeds/{theirs}/resume"),
                ("GET", f"/jobs/{theirs}"),
                ("DELETE", f"/jobs/{theirs}"),
                ("POST", f"/gis-layer-truncate/{other}"),
                ("POST", f"/gis-layer-expire/{other}"),
                # the coverage of a run: a vector layer the key does not name
                ("GET", f"/gis-layer-pretile/{layer}?dryrun=1&coverage_layer=public.countries"),
                ("POST", f"/gis-layer-truncate/{layer}?dryrun=1&coverage_layer=public.countries"),
            ]
            for method, path in refused:
                r = client.request(
                    method, f"{mount}{path}", headers={**operator, **TEXT}, content=T9
                )
                assert r.status_code == 404, (mount, path, r.text)
                assert other not in r.text
            # a reader sees both layers but manages no run; no one without credentials does
            anonymous = TestClient(
                create_app(settings.model_copy(update={"public_layers": "*"})),
                raise_server_exceptions=False,
            )
            with anonymous:
                for method, path in refused[:6] + [("GET", "/seeds")]:
                    r = client.request(method, f"{mount}{path}", headers={**reader, **TEXT})
                    assert r.status_code == 403, (mount, path, r.text)
                    r = anonymous.request(method, f"{mount}{path}", headers=TEXT, content=T9)
                    assert r.status_code == 401, (mount, path, r.text)
        record = JobStore(rdb, settings).get(theirs)
        assert record is not None
        assert (record.outcome, record.cancel_requested) == (None, False)
    finally:
        end_runs(rdb, settings, mine, theirs)


def test_pages_of_the_runs_going_hold_their_limit_newest_first(
    client: TestClient, settings: Settings, rdb: redis.Redis, layer: str
) -> None:
    """``going=1`` listed the queued runs, then the running ones, each state a page of its own:
    ``limit=1`` answered two runs, and ``offset`` skipped that many of each state."""
    runs = [record_run(rdb, settings, layer, running=r) for r in (False, True, False, True)]
    newest = runs[::-1]
    try:
        for mount in MOUNTS:
            url = f"{mount}/seeds?layer={layer}&going=1"
            page = client.get(f"{url}&limit=3").json()["seeds"]
            assert [seed["id"] for seed in page] == newest[:3]
            assert [seed["state"] for seed in page] == ["running", "queued", "running"]
            paged = [
                seed["id"]
                for offset in range(5)
                for seed in client.get(f"{url}&limit=1&offset={offset}").json()["seeds"]
            ]
            assert paged == newest
    finally:
        end_runs(rdb, settings, *runs)


# -- paces ------------------------------------------------------------------------------------


@pytest.mark.parametrize("pace", ["1e-300", "1e-9", "0.01"])
def test_a_pace_too_slow_for_the_watchdog_is_refused_before_any_job(
    client: TestClient, rdb: redis.Redis, layer: str, pace: str
) -> None:
    """A run's sender queues its next chunk ``64 / max_tiles_per_s`` seconds later: at 1e-300
    Celery's countdown overflowed (the sender died with ``OverflowError``), below about 0.07 the
    run was silent past ``MAPSVC_JOB_STALL_S``; either way the layer stayed locked (new runs and
    resumes ``409``, cancelling it a no-op) until the watchdog ended the run, 15 min later."""
    jobs = rdb.zcard("mapsvc:jobs")
    for mount in MOUNTS:
        for dryrun in ("0", "1"):
            r = client.get(
                f"{mount}/gis-layer-pretile/{layer}?minzoom=8&maxzoom=12&async=1"
                f"&max_tiles_per_s={pace}&dryrun={dryrun}"
            )
            assert r.status_code == 400, r.text
            error = assert_error(r.json(), "invalid-input")
            assert error["detail"]["parameter"] == "max_tiles_per_s"
            assert "MAPSVC_JOB_STALL_S" in error["message"]
    assert rdb.zcard("mapsvc:jobs") == jobs
    assert rdb.get(f"mapsvc:pretile-lock:{layer}") is None
    # the slowest pace of the settings (stall 900 s: 2 x 64 / 900 tiles/s) is taken
    r = client.get(f"{PRETILE}/{layer}?minzoom=8&maxzoom=12&dryrun=1&max_tiles_per_s=0.143")
    assert r.status_code == 200, r.text


# -- resumes ----------------------------------------------------------------------------------


@pytest.mark.worker
def test_resumes_race_for_one_job_and_leave_the_layer_free(
    client: TestClient,
    settings: Settings,
    rdb: redis.Redis,
    layer: str,
    worker: Any,
) -> None:
    first = client.get(f"{PRETILE}/{layer}?minzoom=8&maxzoom=12&max_tiles_per_s=40&async=1")
    first_id = first.json()["id"]
    assert wait_running(client, first_id)["state"] == "running"
    assert client.delete(f"/api-user/seeds?layer={layer}").json()["cancelled"] == [first_id]
    assert wait_state(client, first_id, timeout=60)["state"] == "cancelled"

    def resume(mount: str, run: str = first_id) -> Any:
        return client.post(f"{mount}/seeds/{run}/resume?async=1")

    # four resumes at once: one job, the others told which job resumes it
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(resume, MOUNTS * 2))
    assert sorted(a.status_code for a in answers) == [202, 409, 409, 409], [a.text for a in answers]
    [won] = [a.json() for a in answers if a.status_code == 202]
    assert won["params"]["resume_of"] == first_id
    for lost in (a for a in answers if a.status_code == 409):
        assert assert_error(lost.json(), "conflict")["detail"]["job_id"] == won["id"]
    # a resume of a run going, or of a run that is not its layer's last: 409, nothing changed
    assert wait_running(client, won["id"])["state"] == "running"
    again = resume("/api-user", won["id"])
    assert again.status_code == 409, again.text
    assert assert_error(again.json(), "conflict")["detail"]["job_id"] == won["id"]
    again = resume("/api-user")
    assert again.status_code == 409, again.text
    assert assert_error(again.json(), "conflict")["detail"]["job_id"] == won["id"]
    assert wait_state(client, first_id)["state"] == "cancelled"
    # the resumed run cancelled, then resumed in turn: it makes what neither made
    cancelled = client.delete(f"/api-user/seeds/{won['id']}")
    assert cancelled.status_code == 202, cancelled.text
    assert wait_state(client, won["id"], timeout=60)["state"] == "cancelled"
    third = resume("/api/v1", won["id"])
    assert third.status_code == 202, third.text
    assert third.json()["params"]["resume_of"] == won["id"]
    job = wait_state(client, third.json()["id"], timeout=120)
    assert job["state"] == "succeeded", job
    result = job["result"]
    assert result["resumed_of"] == won["id"]
    assert result["resumed"] + result["rendered"] + result["skipped"] == result["plan"]["total"]
    # nothing is left holding the layer or a place: a last resume has nothing to do
    deadline = time.monotonic() + 30
    while rdb.get(f"mapsvc:pretile-lock:{layer}") is not None:
        assert time.monotonic() < deadline, "the layer stayed locked"
        time.sleep(0.2)
    runs = set(rdb.zrange("mapsvc:pretile-runs", 0, -1))
    assert runs.isdisjoint({first_id, won["id"], third.json()["id"]})
    last = resume("/api-user", third.json()["id"])
    assert last.status_code == 409
    assert "nothing to resume" in last.text


def test_a_resume_while_the_layers_next_start_is_queued_is_409_and_changes_nothing(
    client: TestClient, settings: Settings, rdb: redis.Redis, layer: str
) -> None:
    store, ttl = JobStore(rdb, settings), settings.jobs.time_limit_s
    old = record_run(rdb, settings, layer)
    plan = plan_pretile([-78.9, 23.6, -77.5, 24.6], 8, 9)
    PretileCounters(rdb, old, store.ttl_s).start(plan, {"coverage": [-78.9, 23.6, -77.5, 24.6]})
    lock = LayerLock(store, layer, ttl)
    lock.remember(old)
    end_runs(rdb, settings, old)
    queued = record_run(rdb, settings, layer)  # a resume, or a new run, not started yet
    assert lock.acquire(queued) is None
    jobs = rdb.zcard("mapsvc:jobs")
    try:
        for mount in MOUNTS:
            r = client.post(f"{mount}/seeds/{old}/resume?async=1")
            assert r.status_code == 409, r.text
            assert assert_error(r.json(), "conflict")["detail"]["job_id"] == queued
        assert rdb.zcard("mapsvc:jobs") == jobs
        assert rdb.get(lock.key) == queued
        record = store.get(old)
        assert record is not None
        assert record.outcome == "cancelled"
    finally:
        end_runs(rdb, settings, queued)
        lock.release(queued)


# -- a run's coverage ---------------------------------------------------------------------------


@pytest.mark.usefixtures("vector_tables")
def test_a_runs_coverage_from_a_layer_the_caller_may_not_see_is_not_shown(
    client: TestClient, settings: Settings, rdb: redis.Redis, layer: str
) -> None:
    r = client.get(
        f"{PRETILE}/{layer}",
        params={
            "minzoom": 8,
            "maxzoom": 9,
            "coverage_layer": "public.countries",
            "where": "iso_a3 = 'BHS'",
            "async": 1,
        },
    )
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    operator = key_for(client, "operator", [layer])
    try:
        hidden = client.get("/api-user/gis-datasource/public.countries", headers=operator)
        assert hidden.status_code == 404
        [seed] = client.get(f"/api-user/seeds?layer={layer}", headers=operator).json()["seeds"]
        job = client.get(f"/api-user/jobs/{job_id}", headers=operator).json()
        for shown in (seed, job):
            assert shown["id"] == job_id
            assert shown.get("coverage") is None
            assert shown["params"]["coverage"] == {"hidden": True}
        # the admin, who sees that layer, is shown its polygons
        [seed] = client.get(f"/api-user/seeds?layer={layer}").json()["seeds"]
        assert seed["params"]["coverage"]["geometry"]["type"] in ("Polygon", "MultiPolygon")
        assert seed["params"]["coverage"]["layer"] == "public.countries"
    finally:
        client.delete(f"/api-user/jobs/{job_id}")


def test_a_page_of_runs_is_small_whatever_their_coverages(
    client: TestClient, settings: Settings, rdb: redis.Redis, layer: str
) -> None:
    """The viewer asks for the 8 newest runs every second while one goes; an operator may start
    (and cancel) runs over polygons of up to 10,000 vertices as fast as the jobs budget allows,
    and ask ``/seeds?limit=200`` (no budget) as often as they like."""
    sides = 9_990
    ring = [
        [
            -78 + 0.5 * math.cos(2 * math.pi * i / sides),
            24 + 0.5 * math.sin(2 * math.pi * i / sides),
        ]
        for i in range(sides)
    ]
    coverage = Coverage.of_geojson({"type": "Polygon", "coordinates": [[*ring, ring[0]]]}, 0)
    plan = plan_pretile(coverage, 8, 9)
    store, runs = JobStore(rdb, settings), []
    for _ in range(50):
        job_id = str(uuid.uuid4())
        store.create(
            job_id, "pretile", {"style": layer, "coverage": coverage.to_json()}, "x", layer
        )
        PretileCounters(rdb, job_id, store.ttl_s).start(plan, {"coverage": coverage.to_json()})
        runs.append(job_id)
    end_runs(rdb, settings, *runs)
    try:
        started = time.monotonic()
        r = client.get(f"/api-user/seeds?layer={layer}&limit=50")
        seconds = time.monotonic() - started
        print(f"a page of 50 runs: {len(r.content) / 1e6:.1f} MB in {seconds:.2f} s")
        assert r.status_code == 200
        assert len(r.json()["seeds"]) == 50
        assert len(r.content) < 2_000_000
        seed = r.json()["seeds"][0]
        assert seed["params"]["coverage"]["omitted_bytes"] > 2048
        assert len(seed["coverage"]["geometry"]["coordinates"][0]) <= 1001
    finally:
        for job_id in runs:
            rdb.delete(f"mapsvc:job:{job_id}", f"mapsvc:pretile:{job_id}")
        rdb.zrem("mapsvc:jobs", *runs)


# -- expiry and truncation --------------------------------------------------------------------


@pytest.mark.worker
@pytest.mark.usefixtures("vector_tables")
def test_an_expiry_by_an_alias_expires_the_tables_cached_tiles(
    settings: Settings, rdb: redis.Redis, tmp_path: Path, worker: Any
) -> None:
    """The API keeps a vector tile under its table's id (``public.countries``), whatever name
    it was asked by; an expiry by the alias (``countries``) looked for keys of the alias, and in
    the front only at the answers asked by the alias: it removed nothing, and said so."""
    config = tmp_path / "layers.json"
    config.write_text(json.dumps({"layers": {"countries": {"table": "public.countries"}}}))
    front = Path(str(front_vector_cache(settings)["folder"]))
    entries = {
        uri: kept(front, uri)
        for uri in (
            "/api-user/vtile/countries/2/1/1.pbf",
            "/api/v1/vtile/public.countries/2/1/1.pbf",
            "/api-user/vtile/countries/2/2/1.pbf",
        )
    }
    app = create_app(settings.model_copy(update={"vector_config": config}))
    try:
        with admin_client(app, raise_server_exceptions=False) as client:
            for name in ("2/1/1", "2/2/1"):
                r = client.get(f"/api-user/vtile/countries/{name}.pbf")
                assert r.status_code in (200, 204), r.text
            assert {"2/1/1", "2/2/1"} <= cached_vector_tiles(rdb, "public.countries")
            r = client.post("/api-user/gis-layer-expire/countries", content="2/1/1\n", headers=TEXT)
            result = finished(client, r)
        assert result["vector_cache"] >= 1, result
        assert result["front_cache"] == 2, result
        left = cached_vector_tiles(rdb, "public.countries")
        assert "2/1/1" not in left
        assert "2/2/1" in left
        assert [valid_sec(path) for path in entries.values()] == [0, 0, _LATER]
    finally:
        for path in entries.values():
            path.unlink(missing_ok=True)


@pytest.mark.worker
def test_truncation_and_rerendering_stay_out_of_symbolic_links(
    client: TestClient, settings: Settings, layer: str, other: str, worker: Any
) -> None:
    """A link in a layer's cache to another layer's folders (a column, a zoom, a language):
    truncation listed what it led to, and removed (or drew again) the other layer's tiles."""
    root = settings.dirs.rtile
    theirs = put_tiles(root, other, [T9, "9/145/220", "10/290/439"])
    mine = put_tiles(root, layer, [T9_NEXT])
    os.symlink(root / other / "en" / "9" / "145", root / layer / "en" / "9" / "145")
    os.symlink(root / other / "en" / "10", root / layer / "en" / "10")
    os.symlink(root / other / "en", root / layer / "fr")
    rerendered = client.post(
        f"/api-user/gis-layer-expire/{layer}?mode=rerender&minzoom=9&maxzoom=11",
        content=f"{T9}\n",
        headers=TEXT,
    )
    assert finished(client, rerendered)["rerendered"] == 0
    truncated = finished(client, client.post(f"/api-user/gis-layer-truncate/{layer}"))
    assert truncated["removed"] == len(mine)
    assert not any(path.exists() for path in mine)
    assert {path: path.read_bytes() for path in theirs} == theirs


@pytest.mark.worker
@pytest.mark.usefixtures("vector_tables")
def test_the_front_cache_editor_stays_in_its_folder(
    client: TestClient, settings: Settings, tmp_path: Path, worker: Any
) -> None:
    """Links in the front's folder (a kept answer's, a level folder's) led the expiry to write
    ``valid_sec`` into files elsewhere; files that are no kept answer are left alone."""
    front = Path(str(front_vector_cache(settings)["folder"]))
    uri = "/api-user/vtile/public.countries/2/1/1.pbf"
    name = hashlib.md5(uri.encode()).hexdigest()
    outside = nginx_entry(tmp_path / "outside" / name, uri)
    elsewhere = nginx_entry(tmp_path / "level" / "ee" / name, uri)
    free = next(c for c in "0123456789abcdef" if not (front / c).exists())
    link_name = hashlib.md5(f"{uri} link".encode()).hexdigest()
    links = [front / "f" / "fe" / link_name, front / free]
    links[0].parent.mkdir(parents=True, exist_ok=True)
    links[0].symlink_to(outside)
    links[1].symlink_to(tmp_path / "level")
    temporary = nginx_entry(front / "d" / "dd" / f"{name}.0000000001", uri)
    stranger = front / "d" / "dd" / name
    stranger.write_bytes(b"not an answer nginx keeps")
    try:
        r = client.post(
            "/api-user/gis-layer-expire/public.countries", content="2/1/1\n", headers=TEXT
        )
        finished(client, r)
        assert (valid_sec(outside), valid_sec(elsewhere), valid_sec(temporary)) == (_LATER,) * 3
        assert stranger.read_bytes() == b"not an answer nginx keeps"
        assert all(link.is_symlink() for link in links)
    finally:
        for path in (*links, temporary, stranger):
            path.unlink(missing_ok=True)


@pytest.mark.worker
def test_truncating_the_whole_grid_is_the_work_of_the_cached_tiles(
    client: TestClient, settings: Settings, layer: str, other: str, worker: Any
) -> None:
    root = settings.dirs.rtile
    names = [T9, T9_NEXT, "10/290/439", "20/0/0", "24/16777215/16777215"]
    mine = put_tiles(root, layer, names) | put_tiles(root, layer, names[:2], lang="fr")
    theirs = put_tiles(root, other, names)
    started = time.monotonic()
    result = finished(client, client.post(f"/api-user/gis-layer-truncate/{layer}"))
    seconds = time.monotonic() - started
    print(f"whole grid, zooms 0-24, every variant and language: {seconds:.2f} s")
    assert seconds < 30
    assert (result["removed"], result["langs"]) == (len(mine), ["en", "fr"])
    assert not any(path.exists() for path in mine)
    assert {path: path.read_bytes() for path in theirs} == theirs
    # an expiry list at its cap, deepest zoom: its parents and children counted at once
    body = "\n".join(f"24/{i}/{i}" for i in range(100_000))
    started = time.monotonic()
    r = client.post(f"/api-user/gis-layer-expire/{layer}?dryrun=1", content=body, headers=TEXT)
    seconds = time.monotonic() - started
    print(f"dry run of 100 000 tiles of zoom 24: {seconds:.2f} s")
    assert r.status_code == 200, r.text
    zooms = {entry["zoom"]: entry["tiles"] for entry in r.json()["zooms"]}
    assert (zooms[0], zooms[24]) == (1, 100_000)
    assert seconds < 10


# -- the viewer -------------------------------------------------------------------------------


@pytest.mark.server
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium")
def test_the_viewer_sends_credentials_to_export_files_only(
    settings: Settings, rdb: redis.Redis, layer: str
) -> None:
    """``/viewer?pmtiles=<URL>`` opened any URL of the API with the signed-in user's
    credentials: a link to the viewer naming ``gis-layer-truncate/<layer>`` (or a pre-tiling
    run) made the user truncate the layer's cache as they opened it."""
    from playwright.sync_api import expect, sync_playwright

    if not (DIST / "viewer.html").is_file():
        pytest.fail(f"the web pages are not built in {DIST}: run `make web`")
    store = JobStore(rdb, settings)
    targets = [
        f"/api-user/gis-layer-truncate/{layer}?async=1",
        f"/api/v1/gis-layer-pretile/{layer}?minzoom=8&maxzoom=9&async=1",
        f"/api-user/gis-layer-export/{layer}/files/x/../../../../gis-layer-truncate/{layer}",
    ]
    sent: list[tuple[str, str | None]] = []
    with served(settings) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader"],
        )
        try:
            page = browser.new_page()
            page.on(
                "request",
                lambda r: sent.append((urlsplit(r.url).path, r.headers.get("authorization"))),
            )
            page.goto(f"{base}/viewer")
            page.evaluate(
                "(key) => sessionStorage.setItem('mapsvc.credentials',"
                " JSON.stringify({kind: 'key', secret: key, label: 'API key'}))",
                ADMIN_KEY,
            )
            for target in targets:
                page.goto(f"{base}/viewer?pmtiles={quote(target, safe='')}")
                expect(page.locator("#status")).to_contain_text("PMTiles", timeout=20_000)
        finally:
            browser.close()
    asked = [(path, auth) for path, auth in sent if layer in path]
    assert asked, "the page asked nothing"
    assert all(auth is None for _, auth in asked), asked
    records = (store.get(job_id) for job_id in store.job_ids(0, 200, newest_first=True))
    assert [r.id for r in records if r is not None and r.layer == layer] == []
