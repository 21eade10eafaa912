"""Users: accounts with a login and a password, and the check of a login with its backoff.

Every function takes a synchronous `sqlalchemy.Engine` (the API calls them in a thread pool).
Logins are unique whatever their case; a password is kept only as its argon2id hash.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, Row, Table, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError

from shared.auth import hashing
from shared.auth.common import (
    UNSET,
    Unset,
    check_role,
    db_now,
    found,
    layers_in,
    layers_out,
    ordered,
)
from shared.auth.errors import AccountLockedError
from shared.auth.principal import Principal, Role
from shared.auth.schema import login_failures, users
from shared.errors import ConflictError, InvalidInputError, NotFoundError, UnauthorizedError

__all__ = [
    "BAD_CREDENTIALS",
    "User",
    "add_user",
    "authenticate",
    "delete_user",
    "disable_user",
    "get_user",
    "list_users",
    "locked_error",
    "update_user",
    "user_of",
]

#: what every refused login hears, whether the login exists, is disabled or the password wrong
BAD_CREDENTIALS = "wrong login or password"

PASSWORD_MIN = 8
PASSWORD_MAX = 1024
LOGIN_MAX = 200

_ORDERS = {"login": func.lower(users.c.login), "created": users.c.created, "id": users.c.id}


@dataclass(frozen=True)
class User:
    """An account, without its password hash.

    ``layers`` None means every layer. ``locked_until`` is set while failed logins hold the
    login in its backoff (see `authenticate`).
    """

    id: int
    login: str
    role: Role
    layers: frozenset[str] | None
    disabled: bool
    created: datetime
    locked_until: datetime | None = None

    def principal(self) -> Principal:
        """The principal of a request made as this user."""
        return Principal(
            id=f"user:{self.id}",
            name=self.login,
            role=self.role,
            layers=self.layers,
            user_id=self.id,
        )


def user_of(row: Row[Any]) -> User:
    """The `User` of a row of ``users``."""
    return User(
        id=row.id,
        login=row.login,
        role=check_role(row.role),
        layers=layers_out(row.layers),
        disabled=row.disabled,
        created=row.created,
        locked_until=row.locked_until,
    )


def _check_login(login: str) -> str:
    login = login.strip()
    if not login or len(login) > LOGIN_MAX or not login.isprintable():
        raise InvalidInputError(f"a login is 1 to {LOGIN_MAX} printable characters")
    return login


def _check_password(password: str) -> str:
    if not PASSWORD_MIN <= len(password) <= PASSWORD_MAX:
        raise InvalidInputError(f"a password is {PASSWORD_MIN} to {PASSWORD_MAX} characters long")
    return password


def add_user(
    engine: Engine, login: str, password: str, role: str, layers: Iterable[str] | None = None
) -> User:
    """Create a user.

    Args:
        engine: the database.
        login: unique whatever its case; surrounding spaces are dropped.
        password: at least 8 characters; kept only as its hash.
        role: one of `ROLES`.
        layers: the layers the user may see; None: every layer.

    Returns:
        The new user.

    Raises:
        InvalidInputError: a bad login, password, role or layer.
        ConflictError: a user with this login exists.
    """
    values = {
        "login": _check_login(login),
        "password_hash": hashing.hash_password(_check_password(password)),
        "role": check_role(role),
        "layers": layers_in(layers),
    }
    try:
        with engine.begin() as conn:
            row = conn.execute(users.insert().values(values).returning(users)).one()
    except IntegrityError as exc:
        raise ConflictError(f"a user with login {values['login']!r} exists") from exc
    return user_of(row)


def list_users(engine: Engine, *, role: str | None = None, ord: str = "login") -> list[User]:
    """The users, of one role or all, sorted by ``ord`` (login, created or id; ``-``: descending).

    Raises:
        InvalidInputError: an unknown role or order.
    """
    query = ordered(select(users), ord, _ORDERS).order_by(users.c.id)
    if role is not None:
        query = query.where(users.c.role == check_role(role))
    with engine.connect() as conn:
        return [user_of(row) for row in conn.execute(query)]


def get_user(engine: Engine, user_id: int) -> User:
    """The user ``user_id``; NotFoundError if there is none."""
    with engine.connect() as conn:
        return user_of(_row(conn, user_id))


def _row(conn: Connection, user_id: int, *, for_update: bool = False) -> Row[Any]:
    query = select(users).where(users.c.id == user_id)
    row = conn.execute(query.with_for_update() if for_update else query).first()
    if row is None:
        raise NotFoundError(f"no user {user_id}", user_id=user_id)
    return row


def update_user(
    engine: Engine,
    user_id: int,
    *,
    password: str | None = None,
    role: str | None = None,
    layers: Iterable[str] | None | Unset = UNSET,
    disabled: bool | None = None,
) -> User:
    """Change what is given of user ``user_id``; a new password also clears a lockout.

    Args:
        engine: the database.
        user_id: the user.
        password: a new password (at least 8 characters).
        role: a new role.
        layers: the layers the user may see; None: every layer; not given: unchanged.
        disabled: True: the user can no longer log in; False: again.

    Returns:
        The user as changed.

    Raises:
        NotFoundError: no such user.
        InvalidInputError: a bad password, role or layer.
    """
    values: dict[str, Any] = {}
    if password is not None:
        values["password_hash"] = hashing.hash_password(_check_password(password))
        values |= {"failed_logins": 0, "last_failure": None, "locked_until": None}
    if role is not None:
        values["role"] = check_role(role)
    if layers is not UNSET:
        values["layers"] = layers_in(layers)
    if disabled is not None:
        values["disabled"] = disabled
    with engine.begin() as conn:
        if not values:
            return user_of(_row(conn, user_id))
        query = users.update().where(users.c.id == user_id).values(values).returning(users)
        row = conn.execute(query).first()
    if row is None:
        raise NotFoundError(f"no user {user_id}", user_id=user_id)
    return user_of(row)


def delete_user(engine: Engine, user_id: int) -> None:
    """Delete user ``user_id``, its API keys, refresh tokens and codes; NotFoundError if none."""
    with engine.begin() as conn:
        deleted = conn.execute(users.delete().where(users.c.id == user_id)).rowcount
    if not deleted:
        raise NotFoundError(f"no user {user_id}", user_id=user_id)


def disable_user(engine: Engine, login: str) -> User:
    """Disable the user with ``login`` (any case): it can no longer log in nor refresh tokens.

    Raises:
        NotFoundError: no user has this login.
    """
    query = (
        users.update()
        .where(func.lower(users.c.login) == login.strip().lower())
        .values(disabled=True)
        .returning(users)
    )
    return user_of(
        found(engine, query, NotFoundError(f"no user with login {login!r}", login=login))
    )


def authenticate(
    engine: Engine,
    login: str,
    password: str,
    *,
    max_failures: int,
    lock_s: int,
    address_failed: bool,
) -> User:
    """The user whose ``login`` (any case) and ``password`` these are.

    Failed logins in a row (none more than ``lock_s`` apart) are counted per login; from the
    ``max_failures``-th on, each one starts a backoff, 1 s doubling with each further failure
    up to ``lock_s``, during which attempts from addresses that have failed on this login
    (``address_failed``) are refused unchecked, even with the right password. An address that
    has not failed is always checked: guessing from many addresses slows down, and nobody can
    lock the owner out (the API locks each address that fails too often on its own). A
    success clears the count. Logins that are no user are counted and refused the same way,
    with the same errors and messages, and their password is checked against a dummy hash so
    that they take as long: neither the answers nor their timing tell whether a login exists.
    A disabled user is refused like a wrong password.

    Args:
        engine: the database.
        login: the login given.
        password: the password given.
        max_failures: failed logins that start the backoff (``settings.auth.login_max_failures``).
        lock_s: the longest backoff, and how long a failure counts (``settings.auth.login_lock_s``).
        address_failed: whether the attempt comes from an address that has failed on this login
            (in the current lock period): the backoff applies to it.

    Returns:
        The user.

    Raises:
        UnauthorizedError: a wrong login or password, or a disabled user (`BAD_CREDENTIALS`).
        AccountLockedError: the login is in its backoff and ``address_failed``
            (``retry_after_s``: for how long yet).
    """
    key = login.strip().lower()
    if "\x00" in key:  # no login holds a NUL (PostgreSQL's text cannot): none to look up
        hashing.verify_dummy(password)
        raise UnauthorizedError(BAD_CREDENTIALS)
    with engine.connect() as conn:
        row = conn.execute(select(users).where(func.lower(users.c.login) == key)).first()
        table, where = _tracker(row, key)
        lock = (
            conn.execute(select(table.c.locked_until, func.now()).where(where)).first()
            if address_failed
            else None
        )
    if lock is not None and lock.locked_until is not None and lock.locked_until > lock.now:
        raise locked_error((lock.locked_until - lock.now).total_seconds())
    if row is None:
        hashing.verify_dummy(password)
    elif hashing.verify_password(row.password_hash, password) and not row.disabled:
        return _succeeded(engine, row, password)
    with engine.begin() as conn:
        _count_failure(conn, table, where, key, max_failures, lock_s)
    raise UnauthorizedError(BAD_CREDENTIALS)


def _tracker(row: Row[Any] | None, key: str) -> tuple[Table, Any]:
    """Where the failures of a login are counted: its user, or ``login_failures``."""
    if row is None:
        return login_failures, login_failures.c.login == key
    return users, users.c.id == row.id


def locked_error(seconds: float) -> AccountLockedError:
    """What a login refused for ``seconds`` more hears (the same words whatever locked it)."""
    seconds = max(1, math.ceil(seconds))
    return AccountLockedError(
        f"too many failed logins: locked, try again in {seconds} s", retry_after_s=seconds
    )


def _succeeded(engine: Engine, row: Row[Any], password: str) -> User:
    values: dict[str, Any] = {"failed_logins": 0, "last_failure": None, "locked_until": None}
    if hashing.needs_rehash(row.password_hash):
        values["password_hash"] = hashing.hash_password(password)
    with engine.begin() as conn:
        query = users.update().where(users.c.id == row.id).values(values).returning(users)
        return user_of(conn.execute(query).one())


def _count_failure(
    conn: Connection, table: Table, where: Any, key: str, max_failures: int, lock_s: int
) -> None:
    """Count one failed login, and from the ``max_failures``-th in a row start its backoff."""
    if table is login_failures:
        _forget_stale_failures(conn, lock_s)
        conn.execute(insert(login_failures).values(login=key).on_conflict_do_nothing())
    now = db_now(conn)
    state = conn.execute(
        select(table.c.failed_logins, table.c.last_failure).where(where).with_for_update()
    ).first()
    if state is None:  # the user was deleted meanwhile
        return
    recent = state.last_failure is not None and now - state.last_failure < timedelta(seconds=lock_s)
    failures = (state.failed_logins if recent else 0) + 1
    backoff_s = min(lock_s, 2 ** (failures - max_failures)) if failures >= max_failures else 0
    conn.execute(
        table.update()
        .where(where)
        .values(
            failed_logins=failures,
            last_failure=now,
            locked_until=now + timedelta(seconds=backoff_s) if backoff_s else None,
        )
    )


def _forget_stale_failures(conn: Connection, lock_s: int) -> None:
    """Drop the rows of ``login_failures`` that no longer count, being as good as absent.

    A failure older than ``lock_s`` is forgotten by the next one, and a lock it set is over.
    """
    stale = func.now() - timedelta(seconds=lock_s)
    conn.execute(login_failures.delete().where(login_failures.c.last_failure < stale))
