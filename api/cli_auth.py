"""The ``mapsvc`` commands of authentication: ``migrate``, ``user``, ``key``, ``client``.

They call the same domain functions as the admin API (``shared.auth``), on the database of
``MAPSVC_DATABASE_URL`` (its auth tables are migrated first), and retire the API's kept
credential lookups after every change, as the admin API does.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis
import sqlalchemy

from shared.auth import keys, oauth, users
from shared.auth.authenticator import KEPT_S, auth_engine, forget_kept
from shared.auth.migrate import upgrade
from shared.auth.plain import plain
from shared.auth.principal import ROLES
from shared.errors import MapsvcError
from shared.settings import Settings

__all__ = ["add_commands", "first_admin_key", "run"]

_COMMANDS = ("migrate", "user", "key", "client")


def _layers(value: str | None) -> list[str] | None:
    return [item.strip() for item in value.split(",") if item.strip()] if value else None


def _expiry(value: str | None) -> datetime | None:
    """``30d``, ``12h`` or an ISO 8601 time; None: never."""
    if not value:
        return None
    unit = {"d": "days", "h": "hours"}.get(value[-1:])
    if unit is not None and value[:-1].isdigit():
        return datetime.now(UTC) + timedelta(**{unit: int(value[:-1])})
    return datetime.fromisoformat(value)


def _grant(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """``parser`` with the arguments of a new holder of rights: its name, role and layers."""
    parser.add_argument(name)
    parser.add_argument("--role", choices=ROLES, default="reader")
    parser.add_argument("--layers", help="comma-separated layer ids (default: every layer)")
    return parser


def add_commands(sub: Any) -> None:
    """Add the auth commands to the ``mapsvc`` argument parser's sub-commands."""
    sub.add_parser("migrate", help="create or update the auth tables (Alembic)")
    user = sub.add_parser("user", help="users: add, list, disable").add_subparsers(
        dest="action", required=True
    )
    add = _grant(user.add_parser("add", help="add a user (password asked, or from stdin)"), "login")
    add.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    user.add_parser("list", help="list users").add_argument("--role", choices=ROLES)
    user.add_parser("disable", help="disable a user").add_argument("login")
    key = sub.add_parser("key", help="API keys: create, list, revoke").add_subparsers(
        dest="action", required=True
    )
    create = _grant(key.add_parser("create", help="make a key; it is printed once"), "name")
    create.add_argument("--expires", help="30d, 12h or an ISO 8601 time (default: never)")
    create.add_argument("--user-id", type=int, default=None, help="the user the key acts for")
    listing = key.add_parser("list", help="list keys (never the keys themselves)")
    listing.add_argument("--role", choices=ROLES)
    listing.add_argument("--revoked", action="store_true", help="with revoked keys")
    key.add_parser("revoke", help="revoke a key").add_argument("id")
    client = sub.add_parser("client", help="OAuth 2.0 clients: add").add_subparsers(
        dest="action", required=True
    )
    new = client.add_parser("add", help="register a client; its secret is printed once")
    new.add_argument("name")
    new.add_argument("--redirect-uri", action="append", default=[], help="repeatable")
    new.add_argument("--public", action="store_true", help="no secret; PKCE required")
    new.add_argument(
        "--grant-type",
        action="append",
        choices=("authorization_code", "refresh_token", "password"),
        help="repeatable (default: all three)",
    )


def _password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\n")
    first = getpass.getpass("password: ")
    if first != getpass.getpass("again: "):
        raise SystemExit("the passwords differ")
    return first


def _forget(settings: Settings) -> None:
    """Retire the API's kept credential lookups (a change must take effect at once)."""
    client = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=3)
    try:
        forget_kept(client)
    except redis.RedisError as exc:
        print(f"warning: Redis not reachable ({exc}); the API sees the change within {KEPT_S} s")
    finally:
        client.close()


def _show(value: object) -> None:
    print(json.dumps(plain(value), indent=2))


def _act(args: argparse.Namespace, settings: Settings, engine: sqlalchemy.Engine) -> None:
    match args.command, getattr(args, "action", None):
        case "user", "add":
            _show(
                users.add_user(engine, args.login, _password(args), args.role, _layers(args.layers))
            )
        case "user", "list":
            _show(users.list_users(engine, role=args.role))
            return
        case "user", "disable":
            users.disable_user(engine, args.login)
            print(f"user {args.login} disabled")
        case "key", "create":
            key, secret = keys.create_key(
                engine,
                args.name,
                args.role,
                layers=_layers(args.layers),
                expires_at=_expiry(args.expires),
                user_id=args.user_id,
            )
            _show(key)
            print(f"key (shown once): {secret}")
        case "key", "list":
            _show(keys.list_keys(engine, role=args.role, include_revoked=args.revoked))
            return
        case "key", "revoke":
            keys.revoke_key(engine, args.id)
            print(f"key {args.id} revoked")
        case "client", "add":
            grants = tuple(args.grant_type or ("authorization_code", "refresh_token", "password"))
            client, client_secret = oauth.add_client(
                engine, args.name, args.redirect_uri, public=args.public, grant_types=grants
            )
            _show(client)
            if client_secret is not None:
                print(f"client_secret (shown once): {client_secret}")
        case _:
            return  # migrate: done before
    _forget(settings)


def run(args: argparse.Namespace, settings: Settings) -> int | None:
    """Run an auth command; None when ``args`` name another command."""
    if args.command not in _COMMANDS:
        return None
    upgrade(settings.database_url)
    engine = auth_engine(settings)
    try:
        _act(args, settings, engine)
    except MapsvcError as exc:
        print(f"{args.command}: {exc.message}", file=sys.stderr)
        return 2
    finally:
        engine.dispose()
    if args.command == "migrate":
        print("auth tables are up to date")
    return 0


def first_admin_key(settings: Settings) -> Path | None:
    """On a first start: an admin API key, written to ``<work_dir>/auth/admin-key`` (0600).

    Returns:
        The file holding the key, when there is one (made now or on an earlier start); None
        when ``MAPSVC_ADMIN_API_KEY`` is set or admins were made by hand.
    """
    path = settings.work_dir / "auth" / "admin-key"
    if settings.auth.admin_api_key is not None:
        return None
    upgrade(settings.database_url)
    engine = auth_engine(settings)
    try:
        if path.exists():
            kept = path.read_text().strip()
            if keys.principal_for_key(engine, kept) is not None:
                return path
        if users.list_users(engine, role="admin") or keys.list_keys(engine, role="admin"):
            return None
        _, secret = keys.create_key(engine, "first admin key (mapsvc up)", "admin")
    finally:
        engine.dispose()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secret + "\n")
    return path
