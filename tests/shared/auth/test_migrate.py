"""The migrations: idempotent, safe when processes race, and equal to `shared.auth.schema`."""

from __future__ import annotations

import os
import threading

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, create_engine, text

from shared.auth.migrate import upgrade
from shared.auth.schema import SCHEMA, metadata
from tests.conftest import drop_database, make_database


def _auth_tables(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = :s ORDER BY 1"),
                {"s": SCHEMA},
            ).scalars()
        )


def test_upgrade_twice_leaves_one_version(engine: Engine) -> None:
    # the session's database was upgraded twice already
    with engine.connect() as conn:
        versions = conn.execute(text(f"SELECT version_num FROM {SCHEMA}.alembic_version")).all()
    assert [tuple(v) for v in versions] == [("0001",)]
    assert _auth_tables(engine) == [
        "alembic_version",
        "api_keys",
        "auth_codes",
        "login_failures",
        "oauth_clients",
        "refresh_tokens",
        "users",
    ]


def test_racing_upgrades_on_a_new_database() -> None:
    name = f"mapsvc_auth_race_{os.getpid()}"
    url = make_database(name)
    try:
        errors: list[BaseException] = []

        def run() -> None:
            try:
                upgrade(url)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=run) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        engine = create_engine(url)
        try:
            assert "users" in _auth_tables(engine)
            with engine.connect() as conn:
                count = conn.execute(text(f"SELECT count(*) FROM {SCHEMA}.alembic_version"))
                assert count.scalar_one() == 1
        finally:
            engine.dispose()
    finally:
        drop_database(name)


@pytest.mark.filterwarnings("ignore:autogenerate skipping")  # the functional index on lower(login)
def test_migrations_match_the_tables(engine: Engine) -> None:
    def ours(name: str | None, type_: str, parent_names: object) -> bool:
        if type_ == "schema":
            return name == SCHEMA
        return not (type_ == "table" and name == "alembic_version")

    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={
                "include_schemas": True,
                "include_name": ours,
                "compare_server_default": True,
                "version_table_schema": SCHEMA,
            },
        )
        diff = compare_metadata(context, metadata)
    assert diff == []
