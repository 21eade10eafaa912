"""Helpers the stores of users, keys and clients share: checks of input, ordering, time."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Literal, TypeVar

from sqlalchemy import ColumnElement, Connection, Engine, Executable, Row, Select, func, select

from shared.auth.principal import ROLES, Role
from shared.errors import InvalidInputError, NotFoundError

__all__ = [
    "UNSET",
    "Unset",
    "both_layers",
    "check_aware",
    "check_name",
    "check_role",
    "db_now",
    "found",
    "layers_in",
    "layers_out",
    "ordered",
]

T = TypeVar("T", bound=tuple[object, ...])


def found(engine: Engine, query: Executable, missing: NotFoundError) -> Row[Any]:
    """The first row of ``query``, run in a transaction of its own; ``missing`` when none."""
    with engine.begin() as conn:
        row = conn.execute(query).first()
    if row is None:
        raise missing
    return row


class _Unset(enum.Enum):
    UNSET = "unset"


#: "leave as it is", where None has a meaning of its own (``layers=None``: every layer)
UNSET = _Unset.UNSET
Unset = Literal[_Unset.UNSET]


def check_name(name: str, what: str) -> str:
    """``name`` stripped, if 1 to 200 printable characters; else InvalidInputError."""
    name = name.strip()
    if not name or len(name) > 200 or not name.isprintable():
        raise InvalidInputError(f"{what} is 1 to 200 printable characters")
    return name


def check_role(role: str) -> Role:
    """``role`` if it is one of `ROLES`, else InvalidInputError."""
    for known in ROLES:
        if role == known:
            return known
    raise InvalidInputError(f"unknown role {role!r}: one of {', '.join(ROLES)}", role=role)


def layers_in(layers: Iterable[str] | None) -> list[str] | None:
    """Layer ids as stored (sorted, without repeats); None (every layer) stays None."""
    if layers is None:
        return None
    if isinstance(layers, str):
        raise InvalidInputError("layers must be a list of layer ids, not one string")
    found = set(layers)
    for layer in found:
        if not isinstance(layer, str) or not layer.strip():
            raise InvalidInputError(f"bad layer id {layer!r}")
    return sorted(found)


def layers_out(layers: Iterable[str] | None) -> frozenset[str] | None:
    """Stored layer ids as a principal holds them."""
    return None if layers is None else frozenset(layers)


def both_layers(
    first: frozenset[str] | None, second: frozenset[str] | None
) -> frozenset[str] | None:
    """The layers in both sets (None: every layer)."""
    if first is None or second is None:
        return second if first is None else first
    return first & second


def check_aware(when: datetime | None, name: str) -> datetime | None:
    """``when`` if it has a time zone (or is None), else InvalidInputError."""
    if when is not None and when.utcoffset() is None:
        raise InvalidInputError(f"{name} needs a time zone")
    return when


def ordered(query: Select[T], ord: str, columns: Mapping[str, ColumnElement[object]]) -> Select[T]:
    """``query`` sorted by ``ord``: a name of ``columns``, ``-`` before it for descending."""
    column = columns.get(ord.removeprefix("-"))
    if column is None:
        choices = ", ".join(f"{name}, -{name}" for name in columns)
        raise InvalidInputError(f"unknown order {ord!r}: one of {choices}", ord=ord)
    return query.order_by(column.desc() if ord.startswith("-") else column.asc())


def db_now(conn: Connection) -> datetime:
    """The database's time (its transaction's start): one clock for every process."""
    now: datetime = conn.execute(select(func.now())).scalar_one()
    return now
