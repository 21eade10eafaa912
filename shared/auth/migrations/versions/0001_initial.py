"""Users, login failures, API keys, OAuth 2.0 clients, refresh tokens and authorization codes.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

SCHEMA = "mapsvc_auth"
ROLE_CHECK = "role IN ('reader', 'operator', 'admin')"


def _when(name: str, *, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _created() -> sa.Column[object]:
    return sa.Column(
        "created", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
    )


def _fk(table: str, column: str, target: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [column], [f"{SCHEMA}.{target}"], name=f"{table}_{column}_fkey", ondelete="CASCADE"
    )


def _index(table: str, column: str) -> None:
    op.create_index(f"{table}_{column}_idx", table, [column], schema=SCHEMA)


def upgrade() -> None:
    """Create the tables of schema ``mapsvc_auth`` (the schema itself exists already)."""
    op.create_table(
        "users",
        sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
        sa.Column("login", sa.Text, nullable=False),
        sa.Column("password_hash", sa.Text, nullable=False),
        sa.Column("role", sa.Text, nullable=False),
        sa.Column("layers", sa.ARRAY(sa.Text), nullable=True),
        sa.Column("disabled", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("failed_logins", sa.Integer, nullable=False, server_default=sa.text("0")),
        _when("last_failure"),
        _when("locked_until"),
        _created(),
        sa.PrimaryKeyConstraint("id", name="users_pkey"),
        sa.CheckConstraint(ROLE_CHECK, name="users_role_check"),
        schema=SCHEMA,
    )
    op.create_index(
        "users_login_key", "users", [sa.text("lower(login)")], unique=True, schema=SCHEMA
    )
    op.create_table(
        "login_failures",
        sa.Column("login", sa.Text, nullable=False),
        sa.Column("failed_logins", sa.Integer, nullable=False, server_default=sa.text("0")),
        _when("last_failure"),
        _when("locked_until"),
        sa.PrimaryKeyConstraint("login", name="login_failures_pkey"),
        schema=SCHEMA,
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("prefix", sa.Text, nullable=False),
        sa.Column("key_hash", sa.Text, nullable=False),
        sa.Column("role", sa.Text, nullable=False),
        sa.Column("layers", sa.ARRAY(sa.Text), nullable=True),
        sa.Column("user_id", sa.BigInteger, nullable=True),
        _when("expires_at"),
        _when("revoked_at"),
        _created(),
        _when("last_used"),
        sa.PrimaryKeyConstraint("id", name="api_keys_pkey"),
        sa.UniqueConstraint("key_hash", name="api_keys_key_hash_key"),
        sa.CheckConstraint(ROLE_CHECK, name="api_keys_role_check"),
        _fk("api_keys", "user_id", "users.id"),
        schema=SCHEMA,
    )
    _index("api_keys", "user_id")
    op.create_table(
        "oauth_clients",
        sa.Column("client_id", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("secret_hash", sa.Text, nullable=True),
        sa.Column("redirect_uris", sa.ARRAY(sa.Text), nullable=False),
        sa.Column("grant_types", sa.ARRAY(sa.Text), nullable=False),
        _created(),
        sa.PrimaryKeyConstraint("client_id", name="oauth_clients_pkey"),
        schema=SCHEMA,
    )
    op.create_table(
        "refresh_tokens",
        sa.Column("id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("token_hash", sa.Text, nullable=False),
        sa.Column("family_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("client_id", sa.Text, nullable=False),
        _when("expires_at", nullable=False),
        _when("used_at"),
        _when("revoked_at"),
        _created(),
        sa.PrimaryKeyConstraint("id", name="refresh_tokens_pkey"),
        sa.UniqueConstraint("token_hash", name="refresh_tokens_token_hash_key"),
        _fk("refresh_tokens", "user_id", "users.id"),
        _fk("refresh_tokens", "client_id", "oauth_clients.client_id"),
        schema=SCHEMA,
    )
    for column in ("family_id", "user_id", "client_id", "expires_at"):
        _index("refresh_tokens", column)
    op.create_table(
        "auth_codes",
        sa.Column("code_hash", sa.Text, nullable=False),
        sa.Column("family_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("client_id", sa.Text, nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("redirect_uri", sa.Text, nullable=False),
        sa.Column("code_challenge", sa.Text, nullable=True),
        sa.Column("code_challenge_method", sa.Text, nullable=True),
        _when("expires_at", nullable=False),
        _when("used_at"),
        _created(),
        sa.PrimaryKeyConstraint("code_hash", name="auth_codes_pkey"),
        _fk("auth_codes", "client_id", "oauth_clients.client_id"),
        _fk("auth_codes", "user_id", "users.id"),
        schema=SCHEMA,
    )
    for column in ("client_id", "user_id", "expires_at"):
        _index("auth_codes", column)


def downgrade() -> None:
    """Drop the tables (the schema and its version table stay)."""
    for table in (
        "auth_codes",
        "refresh_tokens",
        "oauth_clients",
        "api_keys",
        "login_failures",
        "users",
    ):
        op.drop_table(table, schema=SCHEMA)
