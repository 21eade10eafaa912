"""Seeding modes with a real worker: refresh_before, a paced run, failed tiles retried then
listed; the seeds collection (progress, coverage, cancel all of a layer); who may see them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from shared.settings import Settings
from tests.checks import ADMIN_KEY, assert_error
from tests.jobs import wait_running, wait_state
from tests.layers import RGB, own_layer, stored_tiles

pytestmark = pytest.mark.worker

PRETILE = "/api-user/gis-layer-pretile"


def tile_path(settings: Settings, scene: str, z: int, x: int, y: int) -> Path:
    return settings.dirs.rtile / scene / "en" / str(z) / str(x) / f"{y}.png"


def seed(client: TestClient, scene: str, query: str) -> dict[str, object]:
    r = client.get(f"{PRETILE}/{scene}?{query}")
    assert r.status_code == 200, r.text
    result: dict[str, object] = r.json()
    return result


def test_refresh_before_renders_again_only_the_tiles_older_than_it(
    client: TestClient, settings: Settings, scene: str, worker: subprocess.Popen[bytes]
) -> None:
    first = seed(client, scene, "minzoom=8&maxzoom=11")
    tiles = sorted(stored_tiles(settings, scene))
    assert first["rendered"] == len(tiles) > 4
    old = tiles[::2]
    two_days_ago = time.time() - 2 * 86400
    for z, x, y in old:  # written two days ago, each (a tile of one colour may be a link)
        path = tile_path(settings, scene, z, x, y)
        data = path.read_bytes()
        path.unlink()
        path.write_bytes(data)
        os.utime(path, (two_days_ago, two_days_ago))

    again = seed(client, scene, "minzoom=8&maxzoom=11&refresh_before=1d")

    assert (again["rendered"], again["skipped"]) == (len(old), len(tiles) - len(old))
    for z, x, y in old:
        assert tile_path(settings, scene, z, x, y).stat().st_mtime > two_days_ago + 86400
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(two_days_ago - 3600))
    assert seed(client, scene, f"minzoom=8&maxzoom=11&refresh_before={iso}")["rendered"] == 0


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("refresh_before=7&", "ISO 8601 time"),
        ("refresh_before=2999-01-01&", "in the future"),
        ("refresh_before=1d&nocache=1&", "not both"),
        ("max_tiles_per_s=0&", "max_tiles_per_s"),
    ],
)
def test_a_bad_mode_is_refused_before_any_job(
    client: TestClient, rdb: redis.Redis, scene: str, query: str, message: str
) -> None:
    jobs = rdb.zcard("mapsvc:jobs")
    r = client.get(f"{PRETILE}/{scene}?{query}minzoom=8&maxzoom=9")
    assert r.status_code == 400, r.text
    assert message in r.text
    assert rdb.zcard("mapsvc:jobs") == jobs
    assert rdb.get(f"mapsvc:pretile-lock:{scene}") is None


def test_a_paced_run_keeps_to_its_rate(
    client: TestClient, settings: Settings, scene: str, worker: subprocess.Popen[bytes]
) -> None:
    query = "minzoom=8&maxzoom=12"
    made = seed(client, scene, query)  # cached: the paced run finds them, at its pace
    fast = seed(client, scene, query)
    paced = seed(client, scene, f"{query}&max_tiles_per_s=50")
    total: int = made["plan"]["total"]  # type: ignore[index]
    assert paced["skipped"] == fast["skipped"] == total > 250
    # each step sends about 2 s of tiles (whole chunks of up to 64), the next one that much
    # later: all but the last step's tiles wait for their time
    least = (total - 2 * 50 - 64) / 50
    assert least * 0.9 <= paced["seconds"] <= total / 50 + 5  # type: ignore[operator]
    assert fast["seconds"] < least / 2  # type: ignore[operator]


def test_a_failing_chunk_is_retried_then_its_tiles_are_listed_and_the_run_goes_on(
    client: TestClient,
    settings: Settings,
    rdb: redis.Redis,
    scene: str,
    worker: subprocess.Popen[bytes],
) -> None:
    plan = client.get(f"{PRETILE}/{scene}?minzoom=8&maxzoom=11&dryrun=1").json()
    made = seed(client, scene, "minzoom=8&maxzoom=10")  # zooms 8, 9 cached
    z, x, y = max(t for t in stored_tiles(settings, scene) if t[0] == 9)
    blocked = tile_path(settings, scene, z, x, y)
    blocked.unlink()
    blocked.mkdir()  # the tile cannot be written: its chunk fails every time
    try:
        r = client.get(f"{PRETILE}/{scene}?minzoom=8&maxzoom=11&async=1")
        job_id = r.json()["id"]
        job = wait_state(client, job_id, timeout=120)
    finally:
        blocked.rmdir()
    assert job["state"] == "succeeded", job
    result = job["result"]
    assert f"{z}/{x}/{y}" in result["failed_tiles"]
    assert result["failed"] == len(result["failed_tiles"]) >= 1
    assert all(t.startswith(f"{z}/") for t in result["failed_tiles"])
    assert "could not be written" in result["first_error"]
    done = result["rendered"] + result["skipped"]
    assert done + result["failed"] == plan["total"]  # the run went on past the failure
    assert made["rendered"] < done
    # the other zooms were made whole
    assert {(z_["zoom"], z_["failed"]) for z_ in result["zooms"]} == {
        (8, 0),
        (9, result["failed"]),
        (10, 0),
    }
    # a resume makes the failed tiles (and only their chunk is looked at again)
    r = client.post(f"/api-user/seeds/{job_id}/resume")
    assert r.status_code == 200, r.text
    resumed = r.json()
    assert (resumed["resumed_of"], resumed["failed"]) == (job_id, 0)
    assert resumed["rendered"] == result["failed"]
    assert resumed["resumed"] + resumed["rendered"] + resumed["skipped"] == plan["total"]
    assert (z, x, y) in stored_tiles(settings, scene)


def test_the_seeds_collection_shows_progress_and_cancels_a_layers_runs(
    client: TestClient, settings: Settings, scene: str, worker: subprocess.Popen[bytes]
) -> None:
    r = client.get(f"{PRETILE}/{scene}?minzoom=8&maxzoom=14&async=1&bbox=-78.5,24,-77,25")
    job_id = r.json()["id"]
    assert wait_running(client, job_id)["state"] == "running"
    deadline = time.monotonic() + 60
    while True:
        seeds = client.get(f"/api-user/seeds?layer={scene}&going=1").json()["seeds"]
        if seeds and seeds[0].get("done"):
            break
        assert time.monotonic() < deadline, seeds
        time.sleep(0.2)
    [run] = seeds
    assert (run["id"], run["layer"], run["state"]) == (job_id, scene, "running")
    assert run["total"] == run["done"] + run["remaining"] + run["failed"]
    assert run["tiles_per_s"] > 0
    assert run["eta_s"] is not None
    assert [z["zoom"] for z in run["zooms"]] == list(range(8, 14))
    assert sum(z["tiles"] for z in run["zooms"]) == run["total"]
    assert run["coverage"]["type"] == "Feature"
    assert run["coverage"]["geometry"]["type"] == "Polygon"
    xs = [p[0] for p in run["coverage"]["geometry"]["coordinates"][0]]
    assert (min(xs), max(xs)) == (-78.5, -77.0)

    # the run as a resource of its own: the same descriptor
    one = client.get(f"/api-user/seeds/{job_id}")
    assert one.status_code == 200, one.text
    assert (one.json()["id"], one.json()["total"]) == (job_id, run["total"])
    assert one.json()["done"] >= run["done"]

    r = client.delete(f"/api-user/seeds?layer={scene}")
    assert r.status_code == 200, r.text
    assert r.json() == {"layer": scene, "cancelled": [job_id]}
    assert wait_state(client, job_id, timeout=60)["state"] == "cancelled"
    # an ended run cannot be cancelled again; a job that is no seeding run is no seed
    r = client.delete(f"/api-user/seeds/{job_id}")
    assert r.status_code == 409, r.text
    assert_error(r.json(), "conflict")
    assert client.get(f"/api-user/seeds?layer={scene}&going=1").json()["seeds"] == []
    ended = client.get(f"/api-user/seeds?layer={scene}").json()["seeds"]
    assert [(s["id"], s["state"]) for s in ended] == [(job_id, "cancelled")]


def test_seeds_of_a_layer_the_caller_may_not_see_are_not_found(
    client: TestClient, settings: Settings, rdb: redis.Redis, raster_dir: Path, scene: str
) -> None:
    other = own_layer(settings, rdb, RGB, "seeds", "seeds-other.tif")
    other_run = client.get(f"{PRETILE}/{other}?minzoom=0&maxzoom=1&async=1").json()["id"]
    r = client.post(
        "/api-user/api-keys", json={"name": "seeds", "role": "operator", "layers": [scene]}
    )
    assert r.status_code == 201, r.text
    key = {"Authorization": f"Bearer {r.json()['key']}"}
    for mount in ("/api-user", "/api/v1"):
        for method, path in (
            ("GET", f"/seeds?layer={other}"),
            ("DELETE", f"/seeds?layer={other}"),
            ("GET", f"/seeds/{other_run}"),
            ("DELETE", f"/seeds/{other_run}"),
            ("POST", f"/seeds/{other_run}/resume"),
        ):
            r = client.request(method, f"{mount}{path}", headers=key)
            assert r.status_code == 404, (mount, path, r.text)
            assert other not in r.text
        # its own layer: answered (no run of it yet)
        r = client.delete(f"{mount}/seeds?layer={scene}", headers=key)
        assert r.status_code == 200, r.text
        assert r.json() == {"layer": scene, "cancelled": []}
        mine = client.get(f"{mount}/seeds", headers=key)
        assert mine.status_code == 200
        assert all(s["layer"] == scene for s in mine.json()["seeds"])
    # the run is there: the administrator sees it
    assert client.get(f"/api-user/seeds/{other_run}").json()["layer"] == other
    client.delete(f"/api-user/seeds/{other_run}")  # (a worker of another module may have run it)


def test_the_seed_command_refreshes_paces_resumes_and_cancels(
    client: TestClient,
    live_server: str,
    settings: Settings,
    scene: str,
    worker: subprocess.Popen[bytes],
) -> None:
    env = {**os.environ, "MAPSVC_KEY": ADMIN_KEY}
    base = [sys.executable, "-m", "api.cli", "seed", scene, "--url", f"{live_server}/api/v1"]

    def mapsvc(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args], capture_output=True, text=True, env=env, timeout=120)

    zooms = ("--minzoom", "8", "--maxzoom", "10")
    first = mapsvc(*zooms)
    assert first.returncode == 0, first.stderr
    assert any(
        line.startswith("Done: 26 rendered, 0 skipped") for line in first.stdout.splitlines()
    )
    again = mapsvc(*zooms, "--refresh-before", "1d", "--max-tiles-per-s", "1000")
    assert again.returncode == 0, again.stderr
    assert any(
        line.startswith("Done: 0 rendered, 26 skipped") for line in again.stdout.splitlines()
    )
    refused = mapsvc(*zooms, "--refresh-before", "soon")
    assert refused.returncode == 2
    assert "refresh_before" in refused.stderr
    # a paced run, cancelled from the command line, then resumed from it
    slow = client.get(f"{PRETILE}/{scene}?minzoom=8&maxzoom=12&max_tiles_per_s=20&async=1")
    job_id = slow.json()["id"]
    assert wait_running(client, job_id)["state"] == "running"
    cancel = mapsvc("--cancel")
    assert cancel.returncode == 0, cancel.stderr
    assert cancel.stdout.splitlines() == [f"cancelled job {job_id}"]
    assert wait_state(client, job_id, timeout=60)["state"] == "cancelled"
    resumed = mapsvc("--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert f"Resumed job {job_id}: " in resumed.stdout
    assert resumed.stdout.splitlines()[-1] == "Finish:success"


def test_a_run_is_not_resumed_once_its_layer_is_no_longer_granted(
    client: TestClient, rdb: redis.Redis, scene: str
) -> None:
    """Its creator still sees the run, but resuming renders the layer again."""
    body = {"name": "revoked", "role": "operator", "layers": [scene]}
    created = client.post("/api-user/api-keys", json=body).json()
    key = {"Authorization": f"Bearer {created['key']}"}
    run = client.get(f"{PRETILE}/{scene}?minzoom=0&maxzoom=1&async=1", headers=key).json()["id"]
    client.delete(f"/api-user/seeds/{run}")  # ended: as far as its state goes, resumable
    r = client.put(f"/api-user/api-keys/{created['id']}", json={"layers": ["public.countries"]})
    assert r.status_code == 200, r.text
    assert client.get(f"/api-user/seeds/{run}", headers=key).status_code == 200  # its own
    jobs = rdb.zcard("mapsvc:jobs")
    r = client.post(f"/api-user/seeds/{run}/resume", headers=key)
    assert r.status_code == 404, r.text
    assert scene not in r.text
    assert rdb.zcard("mapsvc:jobs") == jobs
