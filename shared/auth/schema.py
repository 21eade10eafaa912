"""The tables of schema ``mapsvc_auth`` (SQLAlchemy Core); migrations/ creates them.

No secret is stored in clear: passwords as argon2id hashes, keys, tokens, codes and client
secrets as SHA-256 digests (`shared.auth.hashing`). A change here needs a new migration.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    Uuid,
    false,
    func,
    text,
)

__all__ = [
    "SCHEMA",
    "api_keys",
    "auth_codes",
    "login_failures",
    "metadata",
    "oauth_clients",
    "refresh_tokens",
    "users",
]

SCHEMA = "mapsvc_auth"

#: names as PostgreSQL would give them, so that the hand-written migrations name them alike
NAMING = {
    "pk": "%(table_name)s_pkey",
    "uq": "%(table_name)s_%(column_0_name)s_key",
    "fk": "%(table_name)s_%(column_0_name)s_fkey",
    "ck": "%(table_name)s_%(constraint_name)s_check",
    "ix": "%(table_name)s_%(column_0_name)s_idx",
}

metadata = MetaData(schema=SCHEMA, naming_convention=NAMING)

_ROLE_CHECK = "role IN ('reader', 'operator', 'admin')"


def _when(name: str, *, nullable: bool = True) -> Column[Any]:
    return Column(name, DateTime(timezone=True), nullable=nullable)


def _created() -> Column[Any]:
    return Column("created", DateTime(timezone=True), nullable=False, server_default=func.now())


users = Table(
    "users",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("login", Text, nullable=False),
    Column("password_hash", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("layers", ARRAY(Text), nullable=True),  # NULL: every layer
    Column("disabled", Boolean, nullable=False, server_default=false()),
    Column("failed_logins", Integer, nullable=False, server_default=text("0")),
    _when("last_failure"),
    _when("locked_until"),
    _created(),
    CheckConstraint(_ROLE_CHECK, name="role"),
)
Index("users_login_key", func.lower(users.c.login), unique=True)

#: failed logins of logins that are no user: locked like users, so a lock tells nothing
login_failures = Table(
    "login_failures",
    metadata,
    Column("login", Text, primary_key=True),  # lower-cased
    Column("failed_logins", Integer, nullable=False, server_default=text("0")),
    _when("last_failure"),
    _when("locked_until"),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", Uuid(as_uuid=False), primary_key=True),
    Column("name", Text, nullable=False),
    Column("prefix", Text, nullable=False),
    Column("key_hash", Text, nullable=False, unique=True),
    Column("role", Text, nullable=False),
    Column("layers", ARRAY(Text), nullable=True),
    Column("user_id", BigInteger, ForeignKey("users.id", ondelete="CASCADE"), nullable=True),
    _when("expires_at"),
    _when("revoked_at"),
    _created(),
    _when("last_used"),
    CheckConstraint(_ROLE_CHECK, name="role"),
)

oauth_clients = Table(
    "oauth_clients",
    metadata,
    Column("client_id", Text, primary_key=True),
    Column("name", Text, nullable=False),
    Column("secret_hash", Text, nullable=True),  # NULL: a public client
    Column("redirect_uris", ARRAY(Text), nullable=False),
    Column("grant_types", ARRAY(Text), nullable=False),
    _created(),
)

refresh_tokens = Table(
    "refresh_tokens",
    metadata,
    Column("id", Uuid(as_uuid=False), primary_key=True),
    Column("token_hash", Text, nullable=False, unique=True),
    Column("family_id", Uuid(as_uuid=False), nullable=False),
    Column("user_id", BigInteger, ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    Column(
        "client_id",
        Text,
        ForeignKey("oauth_clients.client_id", ondelete="CASCADE"),
        nullable=False,
    ),
    _when("expires_at", nullable=False),
    _when("used_at"),
    _when("revoked_at"),
    _created(),
)

auth_codes = Table(
    "auth_codes",
    metadata,
    Column("code_hash", Text, primary_key=True),
    Column("family_id", Uuid(as_uuid=False), nullable=False),  # of the refresh tokens it gives
    Column(
        "client_id",
        Text,
        ForeignKey("oauth_clients.client_id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("user_id", BigInteger, ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    Column("redirect_uri", Text, nullable=False),
    Column("code_challenge", Text, nullable=True),
    Column("code_challenge_method", Text, nullable=True),
    _when("expires_at", nullable=False),
    _when("used_at"),
    _created(),
)
Index(None, api_keys.c.user_id)
Index(None, refresh_tokens.c.family_id)
Index(None, refresh_tokens.c.user_id)
Index(None, refresh_tokens.c.client_id)
Index(None, refresh_tokens.c.expires_at)
Index(None, auth_codes.c.client_id)
Index(None, auth_codes.c.user_id)
Index(None, auth_codes.c.expires_at)
