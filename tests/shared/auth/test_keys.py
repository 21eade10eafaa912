"""API keys: made once, kept as digests, refused when revoked, expired or malformed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, select, text

from shared.auth.hashing import digest
from shared.auth.keys import (
    create_key,
    get_key,
    is_api_key,
    list_keys,
    principal_for_key,
    revoke_key,
    update_key,
)
from shared.auth.principal import Principal
from shared.auth.schema import api_keys
from shared.auth.users import add_user, delete_user, update_user
from shared.errors import InvalidInputError, NotFoundError


def test_create_and_use(engine: Engine) -> None:
    key, plain = create_key(engine, "ci", "operator", layers=["a"])
    assert is_api_key(plain)
    assert plain.startswith(key.prefix)
    assert len(key.prefix) == 10
    assert (key.name, key.role, key.layers, key.user_id) == (
        "ci",
        "operator",
        frozenset({"a"}),
        None,
    )
    assert not hasattr(key, "key_hash")
    assert principal_for_key(engine, plain) == Principal(
        id=f"key:{key.id}", name="ci", role="operator", layers=frozenset({"a"})
    )
    with engine.connect() as conn:
        stored = conn.execute(select(api_keys.c.key_hash, api_keys.c.last_used)).one()
    assert stored.key_hash == digest(plain)
    assert stored.last_used is not None
    assert get_key(engine, key.id).last_used == stored.last_used


def test_is_api_key() -> None:
    plain = "msk_" + "A" * 43
    assert is_api_key(plain)
    for bad in ("", "msk_", plain[:-1], plain + "A", "msx_" + "A" * 43, "msk_" + "A" * 42 + "/"):
        assert not is_api_key(bad), bad


def test_unknown_and_malformed_keys(engine: Engine) -> None:
    create_key(engine, "ci", "reader")
    assert principal_for_key(engine, "msk_" + "A" * 43) is None
    assert principal_for_key(engine, "not a key") is None


def test_revoked_key_is_refused(engine: Engine) -> None:
    key, plain = create_key(engine, "ci", "reader")
    revoked = revoke_key(engine, key.id)
    assert revoked.revoked_at is not None
    assert revoke_key(engine, key.id).revoked_at == revoked.revoked_at  # kept once set
    assert principal_for_key(engine, plain) is None
    assert list_keys(engine) == []
    assert [k.id for k in list_keys(engine, include_revoked=True)] == [key.id]


def test_expired_key_is_refused(engine: Engine) -> None:
    soon = datetime.now(UTC) + timedelta(hours=1)
    key, plain = create_key(engine, "ci", "reader", expires_at=soon)
    assert principal_for_key(engine, plain) is not None
    update_key(engine, key.id, expires_at=datetime.now(UTC) - timedelta(seconds=1))
    assert principal_for_key(engine, plain) is None
    update_key(engine, key.id, expires_at=None)  # never expires
    assert principal_for_key(engine, plain) is not None
    with engine.begin() as conn:
        conn.execute(api_keys.update().values(expires_at=text("now()")))
    assert principal_for_key(engine, plain) is None
    with pytest.raises(InvalidInputError, match="time zone"):
        create_key(engine, "naive", "reader", expires_at=datetime(2030, 1, 1))  # noqa: DTZ001


def test_update_and_revoke(engine: Engine) -> None:
    key, plain = create_key(engine, "ci", "reader", layers=["a"])
    changed = update_key(engine, key.id, name="deploy", role="admin")
    assert (changed.name, changed.role, changed.layers) == ("deploy", "admin", frozenset({"a"}))
    assert update_key(engine, key.id, layers=None).layers is None
    assert principal_for_key(engine, plain) == Principal(
        id=f"key:{key.id}", name="deploy", role="admin", layers=None
    )
    revoke_key(engine, key.id)
    assert principal_for_key(engine, plain) is None
    assert get_key(engine, key.id).revoked_at is not None  # kept, listed as revoked
    missing = "00000000-0000-0000-0000-000000000000"
    for call in (get_key, revoke_key):
        with pytest.raises(NotFoundError):
            call(engine, missing)
    with pytest.raises(NotFoundError):
        get_key(engine, "not-a-uuid")
    with pytest.raises(InvalidInputError):
        create_key(engine, "ci", "root")
    with pytest.raises(NotFoundError):
        create_key(engine, "ci", "reader", user_id=12345)


def test_list_orders_and_filters(engine: Engine) -> None:
    user = add_user(engine, "alice", "password1", "admin")
    a, _ = create_key(engine, "b-key", "reader")
    b, _ = create_key(engine, "a-key", "admin", user_id=user.id)
    assert [k.id for k in list_keys(engine, ord="name")] == [b.id, a.id]
    assert [k.id for k in list_keys(engine, ord="-name")] == [a.id, b.id]
    assert [k.id for k in list_keys(engine)] == [b.id, a.id]  # newest first
    assert [k.id for k in list_keys(engine, role="reader")] == [a.id]
    assert [k.id for k in list_keys(engine, user_id=user.id)] == [b.id]
    with pytest.raises(InvalidInputError):
        list_keys(engine, ord="key_hash")


def test_key_of_a_user_is_capped_by_the_user(engine: Engine) -> None:
    user = add_user(engine, "alice", "password1", "operator", ["a", "b"])
    key, plain = create_key(engine, "mine", "admin", layers=["b", "c"], user_id=user.id)
    principal = principal_for_key(engine, plain)
    assert principal is not None
    assert (principal.role, principal.layers, principal.user_id) == (
        "operator",
        frozenset({"b"}),
        user.id,
    )
    update_user(engine, user.id, disabled=True)
    assert principal_for_key(engine, plain) is None
    delete_user(engine, user.id)  # its keys go with it
    with pytest.raises(NotFoundError):
        get_key(engine, key.id)
