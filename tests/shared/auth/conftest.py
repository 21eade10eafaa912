"""A throwaway database migrated to ``mapsvc_auth``'s head, emptied before each test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from argon2 import PasswordHasher
from sqlalchemy import Engine, create_engine, text

from shared.auth import hashing
from shared.auth.migrate import upgrade
from shared.auth.schema import metadata
from tests.conftest import drop_database, make_database

#: the hasher production uses, before the tests swap in a fast one
PRODUCTION_HASHER = hashing._hasher


@pytest.fixture(scope="session")
def auth_database_url() -> Iterator[str]:
    """A database of its own for the session, migrated twice (the second run does nothing)."""
    name = f"mapsvc_auth_test_{os.getpid()}"
    url = make_database(name)
    upgrade(url)
    upgrade(url)
    yield url
    drop_database(name)


@pytest.fixture(scope="session")
def auth_engine(auth_database_url: str) -> Iterator[Engine]:
    engine = create_engine(auth_database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def engine(auth_engine: Engine) -> Engine:
    """The session's engine, every auth table emptied first."""
    tables = ", ".join(f"{table.schema}.{table.name}" for table in metadata.sorted_tables)
    with auth_engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    return auth_engine


@pytest.fixture(scope="session", autouse=True)
def fast_hashing() -> Iterator[None]:
    """argon2id with the least work: the tests check logic, not the cost (production's stays)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hashing, "_hasher", PasswordHasher(time_cost=1, memory_cost=8, parallelism=1))
        yield
