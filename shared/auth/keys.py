"""API keys: long-lived bearer credentials for automation, kept only as their digest.

A key is ``msk_`` and 43 URL-safe base64 characters (256 random bits). It is shown once, when
made; listings show its first characters (`ApiKey.prefix`) so that a person can tell keys
apart. A key that belongs to a user never has more rights than that user has now.
"""

from __future__ import annotations

import re
import secrets
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, Row, select
from sqlalchemy.exc import IntegrityError

from shared.auth.common import (
    UNSET,
    Unset,
    both_layers,
    check_aware,
    check_name,
    check_role,
    db_now,
    found,
    layers_in,
    layers_out,
    ordered,
)
from shared.auth.hashing import digest
from shared.auth.principal import ROLES, Principal, Role
from shared.auth.schema import api_keys, users
from shared.errors import NotFoundError

__all__ = [
    "KEY_PREFIX",
    "ApiKey",
    "create_key",
    "get_key",
    "is_api_key",
    "list_keys",
    "principal_for_key",
    "revoke_key",
    "update_key",
]

KEY_PREFIX = "msk_"
_KEY = re.compile(r"msk_[A-Za-z0-9_-]{43}")
#: characters of a key kept in clear (``msk_`` and 6 of the 43 random ones)
_SHOWN = len(KEY_PREFIX) + 6
#: ``last_used`` is written at most this often per key (not on every request)
_LAST_USED_EVERY = timedelta(seconds=60)

_ORDERS = {
    "name": api_keys.c.name,
    "created": api_keys.c.created,
    "expires_at": api_keys.c.expires_at,
    "last_used": api_keys.c.last_used,
}


@dataclass(frozen=True)
class ApiKey:
    """An API key as listed: never the key nor its digest. ``layers`` None: every layer."""

    id: str
    name: str
    prefix: str
    role: Role
    layers: frozenset[str] | None
    user_id: int | None
    expires_at: datetime | None
    revoked_at: datetime | None
    created: datetime
    last_used: datetime | None = None


def _key_of(row: Row[Any]) -> ApiKey:
    return ApiKey(
        id=str(row.id),
        name=row.name,
        prefix=row.prefix,
        role=check_role(row.role),
        layers=layers_out(row.layers),
        user_id=row.user_id,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        created=row.created,
        last_used=row.last_used,
    )


def is_api_key(text: str) -> bool:
    """Whether ``text`` has the form of an API key (``msk_`` and 43 base64url characters)."""
    return _KEY.fullmatch(text) is not None


def _check_id(key_id: str) -> str:
    try:
        return str(uuid.UUID(key_id))
    except ValueError:
        raise NotFoundError(f"no API key {key_id!r}", key_id=key_id) from None


def create_key(
    engine: Engine,
    name: str,
    role: str,
    *,
    layers: Iterable[str] | None = None,
    expires_at: datetime | None = None,
    user_id: int | None = None,
) -> tuple[ApiKey, str]:
    """Make an API key; the key itself is returned here only, and stored as its digest.

    Args:
        engine: the database.
        name: what the key is for.
        role: one of `ROLES`.
        layers: the layers it may see; None: every layer.
        expires_at: when it stops working (with a time zone); None: never.
        user_id: the user it belongs to, if any (deleted with the user, capped by its rights).

    Returns:
        The key as listed, and the key.

    Raises:
        InvalidInputError: a bad name, role, layer or time.
        NotFoundError: no user ``user_id``.
    """
    plain = KEY_PREFIX + secrets.token_urlsafe(32)
    values = {
        "id": str(uuid.uuid4()),
        "name": check_name(name, "a key's name"),
        "prefix": plain[:_SHOWN],
        "key_hash": digest(plain),
        "role": check_role(role),
        "layers": layers_in(layers),
        "expires_at": check_aware(expires_at, "expires_at"),
        "user_id": user_id,
    }
    try:
        with engine.begin() as conn:
            row = conn.execute(api_keys.insert().values(values).returning(api_keys)).one()
    except IntegrityError as exc:  # the only foreign key: the user
        raise NotFoundError(f"no user {user_id}", user_id=user_id) from exc
    return _key_of(row), plain


def list_keys(
    engine: Engine,
    *,
    role: str | None = None,
    ord: str = "-created",
    include_revoked: bool = False,
    user_id: int | None = None,
) -> list[ApiKey]:
    """The API keys, sorted by ``ord`` (name, created, expires_at, last_used; ``-``: descending).

    Args:
        engine: the database.
        role: only keys of this role.
        ord: the order.
        include_revoked: also the revoked keys (expired ones are always listed).
        user_id: only the keys of this user.

    Raises:
        InvalidInputError: an unknown role or order.
    """
    query = ordered(select(api_keys), ord, _ORDERS).order_by(api_keys.c.id)
    if role is not None:
        query = query.where(api_keys.c.role == check_role(role))
    if not include_revoked:
        query = query.where(api_keys.c.revoked_at.is_(None))
    if user_id is not None:
        query = query.where(api_keys.c.user_id == user_id)
    with engine.connect() as conn:
        return [_key_of(row) for row in conn.execute(query)]


def _missing(key_id: str) -> NotFoundError:
    return NotFoundError(f"no API key {key_id!r}", key_id=key_id)


def get_key(engine: Engine, key_id: str) -> ApiKey:
    """The API key ``key_id``; NotFoundError if there is none."""
    query = select(api_keys).where(api_keys.c.id == _check_id(key_id))
    return _key_of(found(engine, query, _missing(key_id)))


def update_key(
    engine: Engine,
    key_id: str,
    *,
    name: str | None = None,
    role: str | None = None,
    layers: Iterable[str] | None | Unset = UNSET,
    expires_at: datetime | None | Unset = UNSET,
) -> ApiKey:
    """Change what is given of API key ``key_id``.

    Args:
        engine: the database.
        key_id: the key.
        name: a new name.
        role: a new role.
        layers: the layers it may see; None: every layer; not given: unchanged.
        expires_at: when it stops working; None: never; not given: unchanged.

    Returns:
        The key as changed.

    Raises:
        NotFoundError: no such key.
        InvalidInputError: a bad name, role, layer or time.
    """
    values: dict[str, Any] = {}
    if name is not None:
        values["name"] = check_name(name, "a key's name")
    if role is not None:
        values["role"] = check_role(role)
    if layers is not UNSET:
        values["layers"] = layers_in(layers)
    if expires_at is not UNSET:
        values["expires_at"] = check_aware(expires_at, "expires_at")
    if not values:
        return get_key(engine, key_id)
    return _change(engine, key_id, values)


def _change(engine: Engine, key_id: str, values: dict[str, Any]) -> ApiKey:
    query = (
        api_keys.update()
        .where(api_keys.c.id == _check_id(key_id))
        .values(values)
        .returning(api_keys)
    )
    return _key_of(found(engine, query, _missing(key_id)))


def revoke_key(engine: Engine, key_id: str) -> ApiKey:
    """Revoke API key ``key_id`` for good (kept, and listed with ``include_revoked``).

    Revoking a revoked key keeps its first revocation time. NotFoundError if there is none.
    """
    key = get_key(engine, key_id)
    if key.revoked_at is not None:
        return key
    with engine.connect() as conn:
        now = db_now(conn)
    return _change(engine, key_id, {"revoked_at": now})


def principal_for_key(engine: Engine, plain: str) -> Principal | None:
    """The principal of a request that shows API key ``plain``.

    A key of a user has the lower of its role and the user's, and only the layers both may
    see; a key of a disabled user is refused.

    Returns:
        The principal (id ``key:<id>``), or None for a malformed, unknown, revoked or expired
        key, or one of a disabled user.
    """
    if not is_api_key(plain):
        return None
    query = (
        select(
            api_keys,
            users.c.role.label("user_role"),
            users.c.layers.label("user_layers"),
            users.c.disabled.label("user_disabled"),
        )
        .outerjoin(users, users.c.id == api_keys.c.user_id)
        .where(api_keys.c.key_hash == digest(plain))
    )
    with engine.begin() as conn:
        row = conn.execute(query).first()
        now = db_now(conn)
        if row is None or row.revoked_at is not None or row.user_disabled:
            return None
        if row.expires_at is not None and row.expires_at <= now:
            return None
        if row.last_used is None or row.last_used < now - _LAST_USED_EVERY:
            conn.execute(api_keys.update().where(api_keys.c.id == row.id).values(last_used=now))
    role = check_role(row.role)
    layers = layers_out(row.layers)
    if row.user_id is not None:
        role = min(role, check_role(row.user_role), key=ROLES.index)
        layers = both_layers(layers, layers_out(row.user_layers))
    return Principal(
        id=f"key:{row.id}", name=row.name, role=role, layers=layers, user_id=row.user_id
    )
