"""Authentication: who sent a request, from the credentials it carries (docs/auth.md).

Accepted forms, first match wins:

- ``Authorization: Bearer <token>``: a JWT access token (``POST /oauth/token``,
  ``POST /api/auth``), or an API key used as a static bearer token;
- ``Authorization: ApiKey <key>`` or ``Authorization: <key>`` (the key alone);
- ``Authorization: Basic base64(login:password)``;
- the query parameter ``api_key=<key>``.

A request without credentials is anonymous; credentials that are not valid are refused at once
(``401``), never taken as anonymous. API keys and Basic logins are looked up in PostgreSQL and
the answer kept in Redis for a short while (``_CACHE_TTL_S``); every change of a user, key or
client bumps a generation number that retires every kept answer at once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Literal

import redis.asyncio as aioredis
import sqlalchemy
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, QueryParams
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from api.access import PRINCIPAL_KEY
from api.errors import error_for, www_authenticate
from api.middleware import HttpMiddleware
from api.mounts import USER_PREFIX, V1_PREFIX
from api.services import services
from shared import quotas
from shared.auth.hashing import digest
from shared.auth.keys import is_api_key, principal_for_key
from shared.auth.principal import ANONYMOUS, Principal
from shared.auth.tokens import SigningKeys, verify_access_token
from shared.auth.users import User, authenticate
from shared.errors import TooManyRequestsError, UnauthorizedError
from shared.settings import Settings

__all__ = [
    "AuthenticationMiddleware",
    "Authenticator",
    "auth_engine",
    "Credentials",
    "GENERATION_KEY",
    "read_credentials",
]

#: how long a looked-up API key or Basic login is kept in Redis
_CACHE_TTL_S = 30
GENERATION_KEY = "mapsvc:auth:generation"
# KEYS: the generation counter. ARGV: the entry's key without the generation. One round trip:
# the generation now, and the entry kept under it.
_LOOKUP = """
local generation = redis.call('GET', KEYS[1]) or '0'
return {generation, redis.call('GET', ARGV[1] .. ':' .. generation)}
"""

#: paths that take credentials of their own (client credentials, a login form): no user
#: authentication happens before them
_OWN_CREDENTIALS = frozenset(
    path
    for prefix in ("", USER_PREFIX, V1_PREFIX)
    for path in (f"{prefix}/oauth/token", f"{prefix}/oauth/authorize")
) | {"/api/auth"}


@dataclass(frozen=True)
class Credentials:
    """What a request offers: an API key, a token, or a login and password."""

    kind: Literal["key", "token", "basic"]
    secret: str  # the key, the token, or the password
    login: str = ""


def _basic(encoded: str) -> Credentials:
    try:
        login, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise UnauthorizedError("Basic credentials are not base64 of login:password") from None
    if not sep or not login:
        raise UnauthorizedError("Basic credentials are not base64 of login:password")
    return Credentials("basic", password, login)


def read_credentials(headers: Headers, query: QueryParams) -> Credentials | None:
    """The credentials of a request, or None when it has none.

    Raises:
        UnauthorizedError: an ``Authorization`` header of a form this service does not take.
    """
    header = headers.get("authorization", "").strip()
    if header:
        scheme, _, value = header.partition(" ")
        value = value.strip()
        match scheme.lower():
            case "bearer" if value:
                return Credentials("key" if is_api_key(value) else "token", value)
            case "apikey" if value:
                return Credentials("key", value)
            case "basic" if value:
                return _basic(value)
        if is_api_key(header):
            return Credentials("key", header)
        raise UnauthorizedError(
            "the Authorization header must be Bearer <token>, ApiKey <key> or Basic <credentials>"
        )
    key = query.get("api_key")
    return Credentials("key", key) if key else None


def auth_engine(settings: Settings) -> sqlalchemy.Engine:
    """The engine of the auth tables: a few pooled connections, used from worker threads."""
    return sqlalchemy.create_engine(
        settings.database_url,
        pool_size=2,
        max_overflow=4,
        pool_pre_ping=True,
        pool_timeout=settings.db_pool_timeout_s,
        connect_args={
            "connect_timeout": 3,
            "options": f"-c statement_timeout={settings.vector.vector_statement_timeout_ms}",
        },
    )


class Authenticator:
    """Turns credentials into a principal: keys and logins from PostgreSQL, tokens by signature."""

    def __init__(
        self,
        settings: Settings,
        engine: sqlalchemy.Engine,
        aredis: aioredis.Redis,
        keys: SigningKeys,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.aredis = aredis
        self.keys = keys
        admin_key = settings.auth.admin_api_key
        self._admin_key = admin_key.get_secret_value() if admin_key is not None else None
        # Basic logins are kept under an HMAC of login and password: without the server's
        # secret a copy of Redis gives nothing to guess passwords against
        self._basic_salt = hashlib.sha256(keys.current_secret().encode()).digest()

    async def principal(self, credentials: Credentials, address: str) -> Principal:
        """The principal the credentials prove.

        Raises:
            UnauthorizedError: the credentials are not valid (unknown, revoked or expired key,
                bad token, wrong login or password, locked account).
            TooManyRequestsError: too many failed logins from ``address``.
        """
        if credentials.kind != "basic" and self._is_admin_key(credentials.secret):
            return Principal(id="key:admin-env", name="MAPSVC_ADMIN_API_KEY", role="admin")
        match credentials.kind:
            case "token":
                return verify_access_token(self.keys, credentials.secret)
            case "key":
                return await self._key(credentials.secret)
            case _:
                return await self._basic(credentials, address)

    def _is_admin_key(self, secret: str) -> bool:
        """Whether ``secret`` is ``MAPSVC_ADMIN_API_KEY`` (compared in constant time)."""
        admin = self._admin_key
        return admin is not None and hmac.compare_digest(secret.encode(), admin.encode())

    async def _key(self, key: str) -> Principal:
        if not is_api_key(key):
            raise UnauthorizedError("the API key is not valid")
        entry = f"mapsvc:auth:key:{digest(key)}"

        async def look_up() -> Principal | None:
            return await run_in_threadpool(principal_for_key, self.engine, key)

        found = await self._kept(entry, look_up)
        if found is None:
            raise UnauthorizedError("the API key is not valid (unknown, revoked or expired)")
        return found

    async def login(self, login: str, password: str, address: str) -> User:
        """The user with this login and password, under the throttles.

        Raises:
            UnauthorizedError: wrong login or password, or a disabled account (one message).
            TooManyRequestsError: the account is locked for a while, or too many failed logins
                came from ``address``.
        """
        auth = self.settings.auth
        limits = {"max_failures": auth.login_address_max_failures, "window_s": auth.login_lock_s}
        allowed = await quotas.login_allowed(self.aredis, address, **limits)
        if not allowed.allowed:
            raise TooManyRequestsError(
                "too many failed logins from this address; try again later",
                retry_after_s=allowed.retry_after_s,
            )
        try:
            return await run_in_threadpool(
                authenticate,
                self.engine,
                login,
                password,
                max_failures=auth.login_max_failures,
                lock_s=auth.login_lock_s,
            )
        except (UnauthorizedError, TooManyRequestsError):
            await quotas.login_failure(self.aredis, address, **limits)
            raise

    async def _basic(self, credentials: Credentials, address: str) -> Principal:
        mac = hmac.new(
            self._basic_salt, f"{credentials.login}\0{credentials.secret}".encode(), "sha256"
        )

        async def look_up() -> Principal | None:
            user = await self.login(credentials.login, credentials.secret, address)
            return user.principal()

        found = await self._kept(f"mapsvc:auth:basic:{mac.hexdigest()}", look_up)
        assert found is not None  # a failed login raises rather than answer nobody
        return found

    async def _kept(
        self, entry: str, look_up: Callable[[], Awaitable[Principal | None]]
    ) -> Principal | None:
        """The principal kept in Redis under ``entry``, else looked up and kept."""
        generation, kept = await self.aredis.eval(_LOOKUP, 1, GENERATION_KEY, entry)
        if kept is not None:
            return _loads(kept)
        found = await look_up()
        await self.aredis.set(f"{entry}:{_str(generation)}", _dumps(found), ex=_CACHE_TTL_S)
        return found

    async def forget(self) -> None:
        """Retire every kept lookup (after a user, key or client changed)."""
        await self.aredis.incr(GENERATION_KEY)


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _dumps(principal: Principal | None) -> str:
    if principal is None:
        return "null"
    fields = asdict(principal)
    fields["layers"] = sorted(principal.layers) if principal.layers is not None else None
    return json.dumps(fields)


def _loads(kept: bytes | str) -> Principal | None:
    fields = json.loads(kept)
    if fields is None:
        return None
    layers = fields.pop("layers")
    return Principal(**fields, layers=frozenset(layers) if layers is not None else None)


class AuthenticationMiddleware(HttpMiddleware):
    """Put the request's principal into the scope (``PRINCIPAL_KEY``), or refuse it (401/429)."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: D102
        scope[PRINCIPAL_KEY] = ANONYMOUS
        if scope["path"] in _OWN_CREDENTIALS:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        try:
            credentials = read_credentials(request.headers, request.query_params)
            if credentials is not None:
                address = scope["client"][0] if scope.get("client") else ""
                authenticator = services(request).authenticator
                scope[PRINCIPAL_KEY] = await authenticator.principal(credentials, address)
        except Exception as exc:  # noqa: BLE001 - every failure becomes its JSON error
            response = await error_for(request, exc)
            if isinstance(exc, UnauthorizedError):
                response.headers["WWW-Authenticate"] = www_authenticate("invalid_token")
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
