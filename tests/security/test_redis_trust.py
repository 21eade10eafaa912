"""Redis is a trust boundary (issue 21, class 6): what the API keeps in Redis about credentials
is signed, so whoever can write to Redis cannot mint one; and the service runs against a Redis
that asks for a password (its clients, the Celery broker and result backend, Flower's URL).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from starlette.testclient import TestClient

from api.app import create_app
from shared.auth.authenticator import GENERATION_KEY, _seal
from shared.auth.hashing import digest
from shared.settings import Settings
from tests.checks import AUTH, assert_error
from tests.conftest import ROOT, app_client, worker_process
from tests.services import poll, spare_port, tail

USERS = "/api-user/users"
ADMIN = {"id": "key:forged", "name": "forged", "role": "admin", "layers": None, "user_id": None}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def kept_name(rdb: redis.Redis, key: str) -> str:
    """The Redis key under which the API keeps what it found for ``key``."""
    generation = rdb.get(GENERATION_KEY) or "0"
    return f"mapsvc:auth:key:{digest(key)}:{generation}"


@pytest.fixture
def anon(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def from_redis(client: TestClient, key: str) -> int:
    """The status of ``GET /users`` with ``key``, what Redis keeps for it read afresh: not what
    this process keeps for a moment (``LOCAL_S``)."""
    client.app.state.services.authenticator._local.clear()  # type: ignore[attr-defined]
    return client.get(USERS, headers=bearer(key)).status_code


def new_key(client: TestClient, role: str) -> str:
    made = client.post("/api-user/api-keys", json={"name": "t", "role": role}, headers=AUTH)
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


def test_a_forged_principal_in_redis_grants_nothing(anon: TestClient, rdb: redis.Redis) -> None:
    key = "msk_" + secrets.token_urlsafe(32)  # no such key
    until = int(time.time()) + 30
    forgeries = [
        json.dumps(ADMIN),  # as kept before signing
        f"{'0' * 64} {until} {json.dumps(ADMIN)}",  # a made-up signature
        f"{'0' * 64}",
        "not even text \xff",
    ]
    for forged in forgeries:
        name = kept_name(rdb, key)
        rdb.set(name, forged, ex=30)
        r = anon.get(USERS, headers=bearer(key))
        assert r.status_code == 401, (forged, r.text)
        assert_error(r.json(), "unauthorized")
        assert rdb.get(name) != forged  # looked up again, and the answer kept in its place


def test_a_signed_entry_moved_or_expired_is_not_trusted(anon: TestClient, rdb: redis.Redis) -> None:
    admin_key, reader_key = new_key(anon, "admin"), new_key(anon, "reader")
    assert anon.get(USERS, headers=bearer(admin_key)).status_code == 200  # kept, signed
    admins = rdb.get(kept_name(rdb, admin_key))
    assert admins is not None
    # the admin key's entry put under the reader key's name
    assert from_redis(anon, reader_key) == 403
    rdb.set(kept_name(rdb, reader_key), admins, ex=30)
    assert from_redis(anon, reader_key) == 403
    # or under an unknown key's
    unknown = "msk_" + secrets.token_urlsafe(32)
    rdb.set(kept_name(rdb, unknown), admins, ex=30)
    assert from_redis(anon, unknown) == 401
    # a signed entry past its time (a generation set back, an old copy put back): looked up
    authenticator = anon.app.state.services.authenticator  # type: ignore[attr-defined]
    name = kept_name(rdb, reader_key)
    body = f"{int(time.time()) - 1} {json.dumps(ADMIN)}"
    stale = f"{_mac(authenticator, name, body)} {body}"
    rdb.set(name, stale, ex=30)
    assert from_redis(anon, reader_key) == 403
    # the same entry in its time would be trusted: the signature is what the checks hold to
    body = f"{int(time.time()) + 30} {json.dumps(ADMIN)}"
    rdb.set(name, f"{_mac(authenticator, name, body)} {body}", ex=30)
    assert from_redis(anon, reader_key) == 200


def _mac(authenticator: Any, name: str, body: str) -> str:
    """The signature the API gives ``body`` kept under ``name`` (with its secret)."""
    return _seal(authenticator._seal_key, name, body)


# -- a Redis with a password ----------------------------------------------------------------


@pytest.fixture
def locked_redis(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """A ``redis-server`` of its own that asks for a password (given on its standard input,
    as compose.yaml gives it): its port and password."""
    port, password = spare_port(), secrets.token_hex(16)
    log = tmp_path / "redis.log"
    proc = subprocess.Popen(
        ["redis-server", "-", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        + ["--appendonly", "no", "--dir", str(tmp_path), "--logfile", str(log)],
        stdin=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    proc.stdin.write(f'requirepass "{password}"\n')
    proc.stdin.close()
    client = redis.Redis(port=port, password=password, socket_timeout=2)

    def answers() -> bool:
        assert proc.poll() is None, tail(log)
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    try:
        poll(answers, 20, "redis-server answering")
        yield port, password
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.worker
def test_the_service_runs_against_a_redis_with_a_password(
    settings: Settings, locked_redis: tuple[int, str], tmp_path: Path
) -> None:
    port, password = locked_redis
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port, socket_timeout=2).set("x", "1")  # no password: refused
    mine = settings.model_copy(update={"redis_url": f"redis://:{password}@127.0.0.1:{port}/0"})
    log = tmp_path / "worker.log"
    # ready: the worker reached Redis, the broker
    with (
        worker_process(mine, log, concurrency=1, timeout=90),
        app_client(mine) as client,
    ):
        # a job through the broker, its record, events and result
        probe = client.post("/api-user/diag/probe?steps=2&delay_ms=10")
        assert probe.status_code == 200, probe.text
        assert probe.json()["steps"] == 2
        # a key looked up and kept in this Redis
        key = new_key(client, "reader")
        assert client.get("/api-user/jobs", headers=bearer(key)).status_code == 200
        kept = redis.Redis(port=port, password=password, decode_responses=True)
        assert kept.keys("mapsvc:auth:key:*")
        kept.close()
    assert password not in log.read_text(errors="replace")  # Celery's banner masks it


def test_compose_gives_redis_a_password_and_every_client_its_url() -> None:
    services: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    required = "${MAPSVC_REDIS_PASSWORD:?"  # no default: compose stops without it
    redis_service = services["redis"]
    assert redis_service["environment"]["REDISCLI_AUTH"].startswith(required)
    command = "\n".join(redis_service["command"])
    assert 'requirepass "$$REDISCLI_AUTH"' in command  # on its standard input
    assert "--requirepass" not in command  # not on its command line
    assert "grep -q PONG" in str(redis_service["healthcheck"]["test"])
    urls = {
        name: service["environment"]["MAPSVC_REDIS_URL"]
        for name, service in services.items()
        if "MAPSVC_REDIS_URL" in (service.get("environment") or {})
    }
    assert {"api", "worker", "flower"} <= set(urls)
    for name, url in urls.items():
        assert url.startswith(f"redis://:{required}"), name
