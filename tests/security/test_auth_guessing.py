"""Guessing keys and tokens (issue 21, class 4): credentials that are not valid are counted per
client address, and past ``MAPSVC_RATE_FAILED_AUTH_PER_MIN`` refused with ``429`` before any
PostgreSQL look-up; what is valid still passes.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from api.app import create_app
from shared.auth import keys
from shared.auth.principal import Principal
from shared.settings import Settings
from tests.checks import AUTH, assert_error

JOBS = "/api-user/jobs"
BUDGET = 3


def address() -> str:
    """An address of its own for one client (its count outlives a test)."""
    return f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.{secrets.randbelow(250)}"


def unknown_key() -> str:
    return "msk_" + secrets.token_urlsafe(32)


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def strict(settings: Settings) -> Settings:
    return settings.model_copy(update={"rate_failed_auth_per_min": BUDGET})


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys looked up in PostgreSQL, in order."""
    seen: list[str] = []
    original = keys.principal_for_key

    def counted(engine: Engine, key: str) -> Principal | None:
        seen.append(key)
        return original(engine, key)

    monkeypatch.setattr("shared.auth.authenticator.principal_for_key", counted)
    return seen


def client_at(settings: Settings, source: str) -> TestClient:
    return TestClient(create_app(settings), raise_server_exceptions=False, client=(source, 40000))


@pytest.fixture
def guesser(strict: Settings) -> Iterator[TestClient]:
    with client_at(strict, address()) as client:
        yield client


def assert_throttled(r: Any) -> None:
    assert r.status_code == 429, r.text
    error = assert_error(r.json(), "rate-limited")
    assert error["detail"]["limit"] == BUDGET
    assert 1 <= int(r.headers["retry-after"]) <= 60


def test_wrong_keys_are_refused_past_the_budget_before_a_look_up(
    guesser: TestClient, lookups: list[str]
) -> None:
    made = guesser.post("/api-user/api-keys", json={"name": "t", "role": "reader"}, headers=AUTH)
    valid = made.json()["key"]
    assert guesser.get(JOBS, headers=bearer(valid)).status_code == 200  # looked up, kept
    guesses = [unknown_key() for _ in range(BUDGET)]
    for guess in guesses:
        r = guesser.get(JOBS, headers=bearer(guess))
        assert r.status_code == 401
        assert_error(r.json(), "unauthorized")
    assert lookups == [valid, *guesses]
    # past the budget: refused, and PostgreSQL is not asked, whatever the spelling
    assert_throttled(guesser.get(JOBS, headers=bearer(unknown_key())))
    assert_throttled(guesser.get(JOBS, params={"api_key": unknown_key()}))
    assert_throttled(guesser.get(JOBS, headers={"Authorization": f"ApiKey {unknown_key()}"}))
    assert_throttled(guesser.get(JOBS, headers=bearer(guesses[0])))  # known to be wrong
    assert lookups == [valid, *guesses]
    # what is valid and needs no look-up still passes from this address
    assert guesser.get(JOBS, headers=AUTH).status_code == 200
    assert guesser.get(JOBS, headers=bearer(valid)).status_code == 200


def test_wrong_tokens_count_and_are_refused_past_the_budget(guesser: TestClient) -> None:
    for n in range(BUDGET):
        r = guesser.get(JOBS, headers=bearer(f"eyJhbGciOiJIUzI1NiJ9.e30.{n}"))
        assert r.status_code == 401
        assert_error(r.json(), "invalid-token")
    assert_throttled(guesser.get(JOBS, headers=bearer("eyJhbGciOiJIUzI1NiJ9.e30.x")))
    # a valid token is no guess: it passes
    login = f"u-{secrets.token_hex(5)}"
    body = {"login": login, "password": "correct horse battery", "role": "reader"}
    assert guesser.post("/api-user/users", json=body, headers=AUTH).status_code == 201
    token = guesser.post("/api/auth", json={"login": login, "password": body["password"]})
    assert guesser.get(JOBS, headers=bearer(token.json()["token"])).status_code == 200


def test_each_address_has_a_budget_of_its_own(strict: Settings) -> None:
    with client_at(strict, address()) as first:
        for _ in range(BUDGET):
            assert first.get(JOBS, headers=bearer(unknown_key())).status_code == 401
        assert_throttled(first.get(JOBS, headers=bearer(unknown_key())))
    with client_at(strict, address()) as second:
        assert second.get(JOBS, headers=bearer(unknown_key())).status_code == 401
