"""Users: their store, and logins with lockout that tell nothing of which logins exist."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, func, select, text

from shared.auth import hashing
from shared.auth.errors import AccountLockedError
from shared.auth.principal import Principal
from shared.auth.schema import login_failures, users
from shared.auth.users import (
    BAD_CREDENTIALS,
    User,
    add_user,
    authenticate,
    delete_user,
    disable_user,
    get_user,
    list_users,
    update_user,
)
from shared.errors import ConflictError, InvalidInputError, NotFoundError, UnauthorizedError
from tests.shared.auth.conftest import PRODUCTION_HASHER

PASSWORD = "s3cret-pass"
#: the throttle's settings, for an address that has failed on the login (the backoff applies)
LOCK: dict[str, Any] = {"max_failures": 3, "lock_s": 300, "address_failed": True}
#: the same, for an address that has not
FRESH = {**LOCK, "address_failed": False}


def test_add_and_get(engine: Engine) -> None:
    user = add_user(engine, " Alice ", PASSWORD, "operator", ["b", "a", "a"])
    assert user.login == "Alice"
    assert user.role == "operator"
    assert user.layers == frozenset({"a", "b"})
    assert user.disabled is False
    assert get_user(engine, user.id) == user
    assert user.principal() == Principal(
        id=f"user:{user.id}",
        name="Alice",
        role="operator",
        layers=frozenset({"a", "b"}),
        user_id=user.id,
    )
    assert add_user(engine, "bob", PASSWORD, "reader").layers is None


def test_add_refusals(engine: Engine) -> None:
    add_user(engine, "alice", PASSWORD, "reader")
    with pytest.raises(ConflictError):
        add_user(engine, "ALICE", PASSWORD, "reader")  # logins are unique whatever the case
    with pytest.raises(InvalidInputError, match="8"):
        add_user(engine, "carol", "short", "reader")
    with pytest.raises(InvalidInputError, match="role"):
        add_user(engine, "carol", PASSWORD, "root")
    with pytest.raises(InvalidInputError):
        add_user(engine, "  ", PASSWORD, "reader")
    with pytest.raises(InvalidInputError):
        add_user(engine, "carol", PASSWORD, "reader", "a,b")
    assert [u.login for u in list_users(engine)] == ["alice"]


def test_list_orders_and_filters(engine: Engine) -> None:
    made = [
        add_user(engine, login, PASSWORD, role)
        for login, role in (("bob", "reader"), ("Alice", "admin"), ("carol", "reader"))
    ]
    assert [u.login for u in list_users(engine)] == ["Alice", "bob", "carol"]
    assert [u.login for u in list_users(engine, ord="-login")] == ["carol", "bob", "Alice"]
    assert [u.id for u in list_users(engine, ord="id")] == [u.id for u in made]
    assert [u.id for u in list_users(engine, ord="-id")] == [u.id for u in reversed(made)]
    assert [u.login for u in list_users(engine, ord="created")][0] == "bob"
    assert [u.login for u in list_users(engine, role="reader")] == ["bob", "carol"]
    with pytest.raises(InvalidInputError, match="order"):
        list_users(engine, ord="password_hash")
    with pytest.raises(InvalidInputError):
        list_users(engine, role="root")


def test_update(engine: Engine) -> None:
    user = add_user(engine, "alice", PASSWORD, "reader", ["a"])
    same = update_user(engine, user.id, role="admin")
    assert (same.role, same.layers) == ("admin", frozenset({"a"}))  # layers left alone
    assert update_user(engine, user.id, layers=None).layers is None  # None: every layer
    assert update_user(engine, user.id, layers=["x"]).layers == frozenset({"x"})
    assert update_user(engine, user.id, disabled=True).disabled is True
    update_user(engine, user.id, password="another-pass", disabled=False)
    assert authenticate(engine, "alice", "another-pass", **LOCK).id == user.id
    with pytest.raises(UnauthorizedError):
        authenticate(engine, "alice", PASSWORD, **LOCK)
    assert update_user(engine, user.id) == get_user(engine, user.id)
    with pytest.raises(NotFoundError):
        update_user(engine, user.id + 100, role="admin")
    with pytest.raises(InvalidInputError):
        update_user(engine, user.id, password="short")


def test_delete_and_disable(engine: Engine) -> None:
    alice = add_user(engine, "alice", PASSWORD, "reader")
    bob = add_user(engine, "bob", PASSWORD, "reader")
    delete_user(engine, alice.id)
    with pytest.raises(NotFoundError):
        get_user(engine, alice.id)
    with pytest.raises(NotFoundError):
        delete_user(engine, alice.id)
    assert disable_user(engine, "BOB").disabled is True
    assert get_user(engine, bob.id).disabled is True
    with pytest.raises(NotFoundError):
        disable_user(engine, "alice")


def test_authenticate_success_any_case(engine: Engine) -> None:
    user = add_user(engine, "Alice", PASSWORD, "reader")
    assert authenticate(engine, "alice", PASSWORD, **LOCK) == user
    assert authenticate(engine, " ALICE ", PASSWORD, **LOCK).id == user.id


def _refusal(
    engine: Engine, login: str, password: str
) -> tuple[type[Exception], str, dict[str, object]]:
    with pytest.raises((UnauthorizedError, AccountLockedError)) as caught:
        authenticate(engine, login, password, **LOCK)
    return type(caught.value), caught.value.message, caught.value.detail


def test_wrong_password_unknown_login_and_disabled_user_look_alike(engine: Engine) -> None:
    add_user(engine, "alice", PASSWORD, "reader")
    add_user(engine, "dave", PASSWORD, "reader")
    disable_user(engine, "dave")
    wrong = _refusal(engine, "alice", "wrong-password")
    assert wrong == (UnauthorizedError, BAD_CREDENTIALS, {})
    assert _refusal(engine, "nobody", "wrong-password") == wrong
    assert _refusal(engine, "dave", PASSWORD) == wrong  # even with the right password


def _push_lock(engine: Engine, seconds: int) -> None:
    """Every lock (of users and of unknown logins) ends ``seconds`` from now."""
    with engine.begin() as conn:
        for table in (users, login_failures):
            conn.execute(
                table.update()
                .where(table.c.locked_until.is_not(None))
                .values(locked_until=text(f"now() + interval '{seconds} s'"))
            )


def test_backoff_after_max_failures_for_addresses_that_failed(engine: Engine) -> None:
    add_user(engine, "alice", PASSWORD, "reader")
    for _ in range(3):  # the third failure starts the backoff: 1 s
        assert _refusal(engine, "alice", "wrong-password")[0] is UnauthorizedError
    _push_lock(engine, 300)
    locked = _refusal(engine, "alice", PASSWORD)  # even the right one, from an address that failed
    assert locked[0] is AccountLockedError
    assert "locked" in locked[1]
    assert "300 s" in locked[1]
    assert locked[2] == {"retry_after_s": 300}
    # an address that has not failed is checked: the owner gets in, and the count starts anew
    assert authenticate(engine, "alice", PASSWORD, **FRESH).locked_until is None
    with engine.connect() as conn:
        assert conn.execute(select(users.c.failed_logins)).scalar_one() == 0
    assert authenticate(engine, "alice", PASSWORD, **LOCK).locked_until is None


def test_the_backoff_doubles_up_to_the_lock_period(engine: Engine) -> None:
    add_user(engine, "alice", PASSWORD, "reader")

    def backoff_s() -> float:
        with engine.connect() as conn:
            left = conn.execute(select(users.c.locked_until - func.now())).scalar_one()
        return float(left.total_seconds())

    for _ in range(3):
        _refusal(engine, "alice", "wrong-password")
    assert 0 < backoff_s() <= 1
    for expected in (2, 4, 8):  # further failures, from addresses that have not failed
        with pytest.raises(UnauthorizedError):
            authenticate(engine, "alice", "wrong-password", **FRESH)
        assert expected - 1 < backoff_s() <= expected
    with engine.begin() as conn:
        conn.execute(users.update().values(failed_logins=40))
    with pytest.raises(UnauthorizedError):
        authenticate(engine, "alice", "wrong-password", **FRESH)
    assert 299 < backoff_s() <= 300  # never longer than the lock period


def test_unknown_logins_back_off_alike(engine: Engine) -> None:
    add_user(engine, "alice", PASSWORD, "reader")
    known = [_refusal(engine, "alice", "wrong-password") for _ in range(3)]
    unknown = [_refusal(engine, "nobody", "wrong-password") for _ in range(3)]
    assert known == unknown
    assert [r[0] for r in known] == [UnauthorizedError] * 3
    _push_lock(engine, 100)
    assert _refusal(engine, "alice", "wrong-password") == _refusal(
        engine, "nobody", "wrong-password"
    )
    assert _refusal(engine, "nobody", "wrong-password")[0] is AccountLockedError
    assert "nobody" not in str(unknown)
    assert "exist" not in str(unknown)


def test_success_resets_the_count(engine: Engine) -> None:
    add_user(engine, "alice", PASSWORD, "reader")
    for _ in range(2):
        _refusal(engine, "alice", "wrong-password")
    authenticate(engine, "alice", PASSWORD, **LOCK)
    for _ in range(2):  # two more failures do not lock: the count started anew
        assert _refusal(engine, "alice", "wrong-password")[0] is UnauthorizedError


def test_old_failures_are_forgotten(engine: Engine) -> None:
    add_user(engine, "alice", PASSWORD, "reader")
    for login in ("alice", "nobody"):
        for _ in range(2):
            _refusal(engine, login, "wrong-password")
    with engine.begin() as conn:  # both failures are older than a lock period
        for table in (users, login_failures):
            conn.execute(table.update().values(last_failure=text("now() - interval '301 s'")))
    for login in ("alice", "nobody"):
        assert _refusal(engine, login, "wrong-password")[0] is UnauthorizedError


def test_login_rehashes_old_parameters(engine: Engine) -> None:
    user = add_user(engine, "alice", PASSWORD, "reader")
    with engine.begin() as conn:
        conn.execute(users.update().values(password_hash=PRODUCTION_HASHER.hash(PASSWORD)))
    assert authenticate(engine, "alice", PASSWORD, **LOCK).id == user.id
    with engine.connect() as conn:
        stored = conn.execute(select(users.c.password_hash)).scalar_one()
    assert not hashing.needs_rehash(stored)
    assert hashing.verify_password(stored, PASSWORD)


def test_user_is_frozen(engine: Engine) -> None:
    user = add_user(engine, "alice", PASSWORD, "reader")
    with pytest.raises(AttributeError):
        user.role = "admin"  # type: ignore[misc]
    assert not hasattr(user, "password_hash")
    assert isinstance(user, User)
