"""Guessing a password (issue 21, class 4): failures lock a login for the address that failed,
never for its owner elsewhere; guesses from many addresses meet the login's backoff.

Against a live server, the client's address given as ``X-Forwarded-For`` (which uvicorn takes
from loopback, as it does from the nginx front), through ``POST /api/auth`` and Basic auth.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from shared.settings import Settings
from tests.checks import AUTH, assert_error
from tests.conftest import served

PASSWORD = "correct horse battery"
WRONG = "not the password at all"


@pytest.fixture(scope="module")
def base(settings: Settings) -> Iterator[str]:
    """The API with the suite's settings: the default login throttles (5 failures, 300 s)."""
    with served(settings) as url:
        yield url


def new_login(base: str) -> str:
    login = f"owner-{uuid.uuid4().hex[:10]}"
    body = {"login": login, "password": PASSWORD, "role": "reader"}
    assert httpx.post(f"{base}/api-user/users", json=body, headers=AUTH).status_code == 201
    return login


def address() -> str:
    """An address of its own for one client (the per-address counts outlive a test)."""
    return f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.{secrets.randbelow(250)}"


def log_in(base: str, login: str, password: str, source: str) -> httpx.Response:
    body = {"login": login, "password": password}
    return httpx.post(f"{base}/api/auth", json=body, headers={"X-Forwarded-For": source})


def basic(base: str, login: str, password: str, source: str) -> httpx.Response:
    headers = {"X-Forwarded-For": source}
    return httpx.get(f"{base}/api-user/jobs", auth=(login, password), headers=headers)


def assert_locked(r: httpx.Response) -> None:
    assert r.status_code == 429, r.text
    assert_error(r.json(), "account-locked")
    assert int(r.headers["retry-after"]) >= 1


def test_wrong_guesses_lock_the_guesser_not_the_owner(base: str) -> None:
    login, attacker = new_login(base), address()
    statuses = [log_in(base, login, WRONG, attacker).status_code for _ in range(12)]
    assert statuses == [401] * 5 + [429] * 7  # MAPSVC_LOGIN_MAX_FAILURES, then locked
    # locked for the guesser's address: even the right password, by either way in
    assert_locked(log_in(base, login, PASSWORD, attacker))
    assert_locked(basic(base, login, PASSWORD, attacker))
    # the owner, from anywhere else, gets in at once: a token, and Basic auth
    r = log_in(base, login, PASSWORD, address())
    assert r.status_code == 200, r.text
    assert r.json()["login"] == login
    assert basic(base, login, PASSWORD, address()).status_code == 200
    # and the guesser is still locked out
    assert_locked(log_in(base, login, WRONG, attacker))


def test_guesses_sent_at_once_get_no_more_tries(base: str) -> None:
    """16 wrong guesses sent at once (each password check takes ~0.1 s): still at most
    ``MAPSVC_LOGIN_MAX_FAILURES`` (5) are checked, the others are locked out; before, every
    guess in flight passed the count (all 16 were checked)."""
    login, attacker = new_login(base), address()
    with ThreadPoolExecutor(16) as pool:
        statuses = list(
            pool.map(lambda _: log_in(base, login, WRONG, attacker).status_code, range(16))
        )
    assert statuses.count(401) == 5, statuses
    assert statuses.count(429) == 11, statuses
    assert_locked(log_in(base, login, PASSWORD, attacker))
    assert log_in(base, login, PASSWORD, address()).status_code == 200  # the owner gets in


def test_basic_guesses_lock_the_guesser_not_the_owner(base: str) -> None:
    login, attacker = new_login(base), address()
    statuses = [basic(base, login, WRONG, attacker).status_code for _ in range(12)]
    assert statuses == [401] * 5 + [429] * 7
    assert_locked(basic(base, login, PASSWORD, attacker))
    assert basic(base, login, PASSWORD, address()).status_code == 200
    assert log_in(base, login, PASSWORD, address()).status_code == 200


def test_guesses_from_many_addresses_meet_the_logins_backoff(base: str) -> None:
    login = new_login(base)
    guessers = [address() for _ in range(8)]
    # each new address is checked: 8 failures, the backoff started at the 5th (1 s) and has
    # doubled with each since (8 s)
    assert [log_in(base, login, WRONG, g).status_code for g in guessers] == [401] * 8
    # an address that has failed on this login waits, whatever it sends
    for refused in (
        log_in(base, login, WRONG, guessers[0]),
        basic(base, login, PASSWORD, guessers[1]),
    ):
        assert_locked(refused)
        assert int(refused.headers["retry-after"]) <= 8
    # one that has not is checked at once: the owner gets in (and the count starts anew)
    assert log_in(base, login, PASSWORD, address()).status_code == 200
    assert log_in(base, login, PASSWORD, guessers[2]).status_code == 200


def test_unknown_logins_are_answered_alike(base: str) -> None:
    known, ghost = new_login(base), f"ghost-{uuid.uuid4().hex[:8]}"
    answers = {}
    for login in (known, ghost):
        source = address()
        seen = [log_in(base, login, WRONG, source) for _ in range(6)]
        answers[login] = [(r.status_code, r.json()["error"]["code"]) for r in seen]
    assert (
        answers[known] == answers[ghost] == [(401, "unauthorized")] * 5 + [(429, "account-locked")]
    )
