"""``mapsvc migrate|user|key|client`` as an admin would use them, and Flower's own login."""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from api.app import create_app
from shared.auth.tokens import flower_basic_auth
from shared.settings import Settings
from tests.conftest import free_port, mapsvc_process, run_mapsvc

PASSWORD = "a long enough password"


def mapsvc(settings: Settings, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``mapsvc *args``, which must succeed."""
    return run_mapsvc(settings, *args, stdin=stdin, check=True)


@pytest.fixture(scope="module")
def anon(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def test_users_from_the_command_line(settings: Settings, anon: TestClient) -> None:
    assert "up to date" in mapsvc(settings, "migrate").stdout
    login = f"cli-{uuid.uuid4().hex[:8]}"
    added = json.loads(
        mapsvc(
            settings,
            "user",
            "add",
            login,
            "--role",
            "operator",
            "--password-stdin",
            stdin=PASSWORD + "\n",
        ).stdout  # fmt: skip
    )
    assert added["login"] == login
    assert added["role"] == "operator"
    listed = json.loads(mapsvc(settings, "user", "list", "--role", "operator").stdout)
    assert login in [user["login"] for user in listed]
    assert anon.post("/api/auth", json={"login": login, "password": PASSWORD}).status_code == 200
    mapsvc(settings, "user", "disable", login)
    r = anon.post("/api/auth", json={"login": login, "password": PASSWORD})
    assert r.status_code == 401


def test_keys_from_the_command_line(settings: Settings, anon: TestClient) -> None:
    made = mapsvc(settings, "key", "create", "cli key", "--role", "reader", "--expires", "1d")
    key = re.search(r"key \(shown once\): (msk_\S+)", made.stdout)
    assert key is not None
    record = json.loads(made.stdout[: made.stdout.index("key (shown once)")])
    assert record["role"] == "reader"
    assert record["expires_at"] is not None
    header = {"Authorization": f"Bearer {key[1]}"}
    assert anon.get("/api-user/gis-raster", headers=header).status_code == 200
    listed = mapsvc(settings, "key", "list").stdout
    assert record["id"] in listed
    assert key[1] not in listed
    mapsvc(settings, "key", "revoke", record["id"])
    assert anon.get("/api-user/gis-raster", headers=header).status_code == 401  # at once


def test_clients_from_the_command_line(settings: Settings, anon: TestClient) -> None:
    made = mapsvc(
        settings, "client", "add", "cli app", "--redirect-uri", "https://cli.example/cb"
    ).stdout
    secret = re.search(r"client_secret \(shown once\): (\S+)", made)
    assert secret is not None
    client = json.loads(made[: made.index("client_secret (shown once)")])
    assert client["redirect_uris"] == ["https://cli.example/cb"]
    assert not client["public"]
    form = {"grant_type": "refresh_token", "refresh_token": "none such"}
    good = anon.post("/oauth/token", data=form, auth=(client["client_id"], secret[1]))
    bad = anon.post("/oauth/token", data=form, auth=(client["client_id"], "wrong"))
    assert good.json()["error"] == "invalid_grant"  # the client is known: the grant is refused
    assert bad.json()["error"] == "invalid_client"


def test_flower_asks_for_a_login(settings: Settings, tmp_path: Path) -> None:
    port = free_port()
    mine = settings.model_copy(update={"flower_port": port})
    with mapsvc_process(mine, "flower", log=tmp_path / "flower.log", stop_timeout=20):
        deadline, anonymous = time.monotonic() + 30, None
        while anonymous is None:
            try:
                anonymous = httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "Flower did not start"
                time.sleep(0.3)
        assert anonymous.status_code == 401
        login, _, password = flower_basic_auth(settings).partition(":")
        assert httpx.get(f"http://127.0.0.1:{port}/", auth=(login, "wrong")).status_code == 401
        assert httpx.get(f"http://127.0.0.1:{port}/", auth=(login, password)).status_code == 200
