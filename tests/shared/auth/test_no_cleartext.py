"""Nothing secret is stored in clear: no password, key, secret, refresh token nor code."""

from __future__ import annotations

from sqlalchemy import ARRAY, Engine, String, func, select, text

from shared.auth import oauth
from shared.auth.keys import create_key
from shared.auth.schema import metadata
from shared.auth.users import add_user


def _stored_text(engine: Engine) -> list[str]:
    """Every text value (text array items one by one) of every auth table."""
    values: list[str] = []
    with engine.connect() as conn:
        for table in metadata.sorted_tables:
            for column in table.columns:
                if isinstance(column.type, ARRAY):
                    rows = conn.execute(select(func.unnest(column)))
                elif isinstance(column.type, String):
                    rows = conn.execute(select(column))
                else:
                    continue
                values.extend(value for value in rows.scalars() if value is not None)
    return values


def _rows_as_text(engine: Engine) -> str:
    """Every row of every auth table, each written out whole by PostgreSQL."""
    with engine.connect() as conn:
        return "\n".join(
            line
            for table in metadata.sorted_tables
            for line in conn.execute(text(f"SELECT t::text FROM {table.fullname} t")).scalars()
        )


def test_database_holds_no_secret_in_clear(engine: Engine) -> None:
    password = "clear-password-P"
    user = add_user(engine, "alice", password, "admin", ["layer-a"])
    _, key = create_key(engine, "ci", "reader", user_id=user.id)
    client, secret = oauth.add_client(engine, "web", ["https://app.example/cb"])
    assert secret is not None
    refresh = oauth.issue_refresh_token(engine, user.id, client.client_id, 600)
    code = oauth.issue_code(
        engine, client.client_id, user.id, "https://app.example/cb", None, None, 60
    )
    stored = _stored_text(engine)
    # the dump reads what was written: logins, names, URIs, layers and the hashes
    for expected in ("alice", "ci", "web", "https://app.example/cb", "layer-a", client.client_id):
        assert expected in stored
    assert sum(value.startswith("$argon2id$") for value in stored) == 1
    dump = "\n".join(stored) + _rows_as_text(engine)
    for clear in (password, key, secret, refresh, code):
        assert clear not in dump
    assert key[:10] in dump  # the shown prefix, and only it
    assert key[:11] not in dump
