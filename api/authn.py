"""Authentication: who sent a request, from the credentials it carries (docs/auth.md).

Accepted forms, one per request (two, even alike, are refused: `read_credentials`):

- ``Authorization: Bearer <token>``: a JWT access token (``POST /oauth/token``,
  ``POST /api/auth``), or an API key used as a static bearer token;
- ``Authorization: ApiKey <key>`` or ``Authorization: <key>`` (the key alone);
- ``Authorization: Basic base64(login:password)``;
- the query parameter ``api_key=<key>``.

A request without credentials is anonymous; credentials that are not valid are refused at once
(``401``), never taken as anonymous, and counted per client address: past
``MAPSVC_RATE_FAILED_AUTH_PER_MIN`` a minute, keys and tokens from that address that are not
valid, or not known without a look-up, are refused with ``429`` before any look-up. API keys
and Basic logins are looked up in PostgreSQL and the answer kept in Redis for a short while
(``_CACHE_TTL_S``), signed (HMAC-SHA256 with a key derived from the signing secret): an entry
whose signature does not hold is looked up again, so whoever can write to Redis cannot mint a
credential. Every change of a user, key or client bumps a generation number that retires
every kept answer at once.

Failed logins (Basic, ``POST /api/auth``, the password grant) are throttled per client
address, per login and address (a lock of that address alone), and per login (a backoff that
only addresses that have failed on it meet): see `Authenticator.login`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Literal

import redis.asyncio as aioredis
import sqlalchemy
from redis.exceptions import RedisError
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
from shared.auth.users import User, authenticate, locked_error
from shared.errors import InvalidInputError, TooManyRequestsError, UnauthorizedError
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
#: the window of the budget of failed credentials (``MAPSVC_RATE_FAILED_AUTH_PER_MIN``)
_FAILED_AUTH_WINDOW_S = 60.0
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
    for path in (f"{prefix}/oauth/token", f"{prefix}/oauth/authorize", f"{prefix}/api/auth")
)


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
    if not sep or not login or not password:
        raise UnauthorizedError("Basic credentials are not base64 of login:password")
    return Credentials("basic", password, login)


def _header_credentials(header: str) -> Credentials:
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


def read_credentials(headers: Headers, query: QueryParams) -> Credentials | None:
    """The credentials of a request, or None when it has none.

    The one parser of credentials: the nginx front asks the API rather than read them itself
    (api/front.py). A request offers one credential, an ``Authorization`` header or one
    ``api_key`` parameter; more of them (the header twice, ``api_key`` twice, or both, even
    alike) are refused, as RFC 6750 section 2 asks. An empty ``Authorization`` header is no
    header; an empty ``api_key`` is refused.

    Raises:
        InvalidInputError: more than one credential (400).
        UnauthorizedError: an empty ``api_key``, or an ``Authorization`` header of a form this
            service does not take (401).
    """
    offered = [value for value in map(str.strip, headers.getlist("authorization")) if value]
    keys = query.getlist("api_key")
    if len(offered) + len(keys) > 1:
        raise InvalidInputError(
            "one credential per request: an Authorization header or one api_key parameter",
            parameter="Authorization" if len(offered) > 1 else "api_key",
        )
    if keys:
        if not keys[0]:
            raise UnauthorizedError("the api_key parameter is empty")
        return Credentials("key", keys[0])
    return _header_credentials(offered[0]) if offered else None


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
        secret = keys.current_secret().encode()
        # Basic logins are kept under an HMAC of login and password: without the server's
        # secret a copy of Redis gives nothing to guess passwords against
        self._basic_salt = hashlib.sha256(secret).digest()
        # what is kept in Redis is signed with a key of its own, derived from the same secret
        self._seal_key = hmac.digest(secret, b"mapsvc:auth:kept-principal", "sha256")

    async def principal(self, credentials: Credentials, address: str) -> Principal:
        """The principal the credentials prove.

        Raises:
            UnauthorizedError: the credentials are not valid (unknown, revoked or expired key,
                bad token, wrong login or password).
            TooManyRequestsError: too many failed logins, or too many keys and tokens that
                were not valid, from ``address``; a login locked for ``address``.
        """
        if credentials.kind == "basic":
            return await self._basic(credentials, address)
        if self._is_admin_key(credentials.secret):
            return Principal(id="key:admin-env", name="MAPSVC_ADMIN_API_KEY", role="admin")
        try:
            if credentials.kind == "token":
                return verify_access_token(self.keys, credentials.secret)
            return await self._key(credentials.secret, address)
        except UnauthorizedError:
            await self._failed(address)
            raise

    def _is_admin_key(self, secret: str) -> bool:
        """Whether ``secret`` is ``MAPSVC_ADMIN_API_KEY`` (compared in constant time)."""
        admin = self._admin_key
        return admin is not None and hmac.compare_digest(secret.encode(), admin.encode())

    async def _key(self, key: str, address: str) -> Principal:
        if not is_api_key(key):
            raise UnauthorizedError("the API key is not valid")
        entry = f"mapsvc:auth:key:{digest(key)}"

        async def look_up() -> Principal | None:
            await self._within_budget(address)  # past it, no look-up
            return await run_in_threadpool(principal_for_key, self.engine, key)

        found = await self._kept(entry, look_up)
        if found is None:
            raise UnauthorizedError("the API key is not valid (unknown, revoked or expired)")
        return found

    async def _within_budget(self, address: str) -> None:
        """Refuse ``address`` once its keys and tokens failed too often this minute.

        Raises:
            TooManyRequestsError: past ``MAPSVC_RATE_FAILED_AUTH_PER_MIN`` (``Retry-After``).
        """
        limit = self.settings.auth.rate_failed_auth_per_min
        budget = await quotas.failures_allowed(
            self.aredis,
            f"failed-auth:{address}",
            max_failures=limit,
            window_s=_FAILED_AUTH_WINDOW_S,
        )
        if not budget.allowed:
            raise TooManyRequestsError(
                f"too many API keys or tokens that are not valid from this address: at most"
                f" {limit} a minute; try again later",
                limit=limit,
                retry_after_s=budget.retry_after_s,
            )

    async def _failed(self, address: str) -> None:
        """Count a key or token from ``address`` that was not valid, past its budget refused
        (as :meth:`_within_budget`). While Redis is down nothing is counted: the ``401``
        stands (a budget never turns an outage into errors)."""
        with contextlib.suppress(RedisError):
            await self._within_budget(address)
            await quotas.count_failure(
                self.aredis,
                f"failed-auth:{address}",
                max_failures=self.settings.auth.rate_failed_auth_per_min,
                window_s=_FAILED_AUTH_WINDOW_S,
            )

    async def login(self, login: str, password: str, address: str) -> User:
        """The user with this login and password, under the throttles.

        Three counts of failures, each over ``MAPSVC_LOGIN_LOCK_S`` from its first: of the
        client address (past ``MAPSVC_LOGIN_ADDRESS_MAX_FAILURES``, its logins are refused);
        of the login from this address (past ``MAPSVC_LOGIN_MAX_FAILURES``, this login is
        locked for this address alone); of the login from anywhere (its backoff, met only by
        addresses that have failed on it: see `authenticate`). The right password from an
        address that has not failed is never refused: nobody can lock its owner out.

        Raises:
            UnauthorizedError: wrong login or password, or a disabled account (one message).
            TooManyRequestsError: the login is locked for ``address`` (``account-locked``),
                or too many failed logins came from ``address``.
        """
        auth = self.settings.auth
        window = {"window_s": auth.login_lock_s}
        by_address = f"login:{address}"
        by_login = f"login:{address}:{digest(login.strip().lower())}"
        allowed = await quotas.failures_allowed(
            self.aredis, by_address, max_failures=auth.login_address_max_failures, **window
        )
        if not allowed.allowed:
            raise TooManyRequestsError(
                "too many failed logins from this address; try again later",
                retry_after_s=allowed.retry_after_s,
            )
        mine = await quotas.failures_allowed(
            self.aredis, by_login, max_failures=auth.login_max_failures, **window
        )
        if not mine.allowed:
            raise locked_error(mine.retry_after_s)
        try:
            user = await run_in_threadpool(
                authenticate,
                self.engine,
                login,
                password,
                max_failures=auth.login_max_failures,
                lock_s=auth.login_lock_s,
                address_failed=mine.remaining < mine.limit,  # it failed on this login lately
            )
        except (UnauthorizedError, TooManyRequestsError):
            await quotas.count_failure(
                self.aredis, by_address, max_failures=auth.login_address_max_failures, **window
            )
            await quotas.count_failure(
                self.aredis, by_login, max_failures=auth.login_max_failures, **window
            )
            raise
        await quotas.forget_failures(self.aredis, by_login)
        return user

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
        """The principal kept in Redis under ``entry``, else looked up and kept.

        A kept answer whose signature does not hold (written by someone without the signing
        secret, or under another entry, or expired) is not trusted: it is looked up again.
        """
        generation, kept = await self.aredis.eval(_LOOKUP, 1, GENERATION_KEY, entry)
        name = f"{entry}:{_str(generation)}"
        if kept is not None:
            trusted, principal = _loads(self._seal_key, name, _str(kept))
            if trusted:
                return principal
        found = await look_up()
        await self.aredis.set(name, _dumps(self._seal_key, name, found), ex=_CACHE_TTL_S)
        return found

    async def forget(self) -> None:
        """Retire every kept lookup (after a user, key or client changed)."""
        await self.aredis.incr(GENERATION_KEY)


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _seal(key: bytes, name: str, body: str) -> str:
    """The HMAC-SHA256 of ``body`` as kept under the Redis key ``name``, in hex."""
    return hmac.new(key, f"{name}\n{body}".encode(), "sha256").hexdigest()


def _dumps(key: bytes, name: str, principal: Principal | None) -> str:
    """``principal`` (None: no such credential) as kept under ``name``: ``<mac> <until> <json>``,
    the MAC (`_seal`) over the name, the time it may be trusted until and the JSON."""
    if principal is None:
        fields = None
    else:
        fields = asdict(principal)
        fields["layers"] = sorted(principal.layers) if principal.layers is not None else None
    body = f"{int(time.time()) + _CACHE_TTL_S} {json.dumps(fields)}"
    return f"{_seal(key, name, body)} {body}"


def _loads(key: bytes, name: str, kept: str) -> tuple[bool, Principal | None]:
    """Whether what is kept under ``name`` is trusted (signed for this name with ``key``,
    checked in constant time, and not past its time), and the principal it holds."""
    mac, _, body = kept.partition(" ")
    until, _, data = body.partition(" ")
    if not hmac.compare_digest(mac.encode(), _seal(key, name, body).encode()):
        return False, None
    if not until.isdigit() or int(until) < time.time():
        return False, None
    fields = json.loads(data)
    if fields is None:
        return True, None
    layers = fields.pop("layers")
    return True, Principal(**fields, layers=frozenset(layers) if layers is not None else None)


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
