"""Credentials to principals, with the lookups kept in Redis and the failures throttled.

:class:`Authenticator` takes the credentials of a request (:class:`Credentials`, read by the
API) and the client's address, and answers the principal they prove. Credentials that are not
valid are refused at once and counted per client address: past
``MAPSVC_RATE_FAILED_AUTH_PER_MIN`` a minute, keys and tokens from that address that are not
valid, or not known without a look-up, are refused with ``429`` before any look-up. API keys
and Basic logins are looked up in PostgreSQL and the answer kept in Redis for a short while
(``_CACHE_TTL_S``), signed (HMAC-SHA256 with a key derived from the signing secret): an entry
whose signature does not hold is looked up again, so whoever can write to Redis cannot mint a
credential. Every change of a user, key or client bumps a generation number that retires
every kept answer at once (:meth:`Authenticator.forget`, :func:`forget_kept`).

Failed logins (Basic, ``POST /api/auth``, the password grant) are throttled per client
address, per login and address (a lock of that address alone), and per login (a backoff that
only addresses that have failed on it meet): see :meth:`Authenticator.login`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Literal

import redis
import redis.asyncio as aioredis
import sqlalchemy
from redis.exceptions import RedisError

from shared import quotas
from shared.auth.hashing import digest
from shared.auth.keys import is_api_key, principal_for_key
from shared.auth.principal import Principal
from shared.auth.tokens import SigningKeys, verify_access_token
from shared.auth.users import User, authenticate, locked_error
from shared.errors import TooManyRequestsError, UnauthorizedError
from shared.settings import AuthSettings, Settings

__all__ = [
    "GENERATION_KEY",
    "KEPT_S",
    "LOCAL_S",
    "Authenticator",
    "Credentials",
    "auth_engine",
    "forget_kept",
]

#: how long a looked-up API key or Basic login is kept in Redis
KEPT_S = 30
#: how long a process trusts a principal it got from Redis without asking again: a key revoked
#: (or a generation bumped) by another process still works here this long at most, as through
#: the nginx front (``MAPSVC_FRONT_ACCESS_TTL_S``, 5 s by default)
LOCAL_S = 2.0
#: the most principals a process keeps (the oldest go first)
_LOCAL_MAX = 10_000
#: the window of the budget of failed credentials (``MAPSVC_RATE_FAILED_AUTH_PER_MIN``)
_FAILED_AUTH_WINDOW_S = 60.0
#: the Redis key of the generation of kept lookups: bumping it retires them all
GENERATION_KEY = "mapsvc:auth:generation"
# KEYS: the generation counter. ARGV: the entry's key without the generation. One round trip:
# the generation now, and the entry kept under it.
_LOOKUP = """
local generation = redis.call('GET', KEYS[1]) or '0'
return {generation, redis.call('GET', ARGV[1] .. ':' .. generation)}
"""


@dataclass(frozen=True)
class Credentials:
    """What a request offers: an API key, a token, or a login and password."""

    kind: Literal["key", "token", "basic"]
    secret: str  # the key, the token, or the password
    login: str = ""


def auth_engine(settings: Settings) -> sqlalchemy.Engine:
    """The engine of the auth tables: a few pooled connections, used from worker threads;
    statements end after ``MAPSVC_AUTH_STATEMENT_TIMEOUT_MS``."""
    timeout_ms = settings.auth.statement_timeout_ms
    return sqlalchemy.create_engine(
        settings.database_url,
        pool_size=2,
        max_overflow=4,
        pool_pre_ping=True,
        pool_timeout=settings.db_pool_timeout_s,
        connect_args={"connect_timeout": 3, "options": f"-c statement_timeout={timeout_ms}"},
    )


def forget_kept(client: redis.Redis) -> None:
    """Retire every kept lookup, from a process without an :class:`Authenticator` (the CLI);
    as :meth:`Authenticator.forget`.

    Raises:
        redis.RedisError: Redis could not be reached (the lookups expire within ``KEPT_S``).
    """
    client.incr(GENERATION_KEY)


class Authenticator:
    """Turns credentials into a principal: keys and logins from PostgreSQL, tokens by signature.

    Its surface: :meth:`principal` (credentials and an address to a principal), :meth:`login`
    (a login and password to a user, throttled), :meth:`forget` (after a change of a user, key
    or client); ``engine`` (the auth tables) and ``keys`` (the signing keys of tokens).
    """

    def __init__(
        self,
        settings: AuthSettings,
        engine: sqlalchemy.Engine,
        aredis: aioredis.Redis,
        keys: SigningKeys,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.aredis = aredis
        self.keys = keys
        admin_key = settings.admin_api_key
        self._admin_key = admin_key.get_secret_value() if admin_key is not None else None
        secret = keys.current_secret().encode()
        # Basic logins are kept under an HMAC of login and password: without the server's
        # secret a copy of Redis gives nothing to guess passwords against
        self._basic_salt = hashlib.sha256(secret).digest()
        # what is kept in Redis is signed with a key of its own, derived from the same secret
        self._seal_key = hmac.digest(secret, b"mapsvc:auth:kept-principal", "sha256")
        # entry (a digest of the credential, never the credential) -> (trusted until, principal)
        self._local: dict[str, tuple[float, Principal]] = {}

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
            return await asyncio.to_thread(principal_for_key, self.engine, key)

        found = await self._kept(entry, look_up)
        if found is None:
            raise UnauthorizedError("the API key is not valid (unknown, revoked or expired)")
        return found

    async def _within_budget(self, address: str) -> None:
        """Refuse ``address`` once its keys and tokens failed too often this minute.

        Raises:
            TooManyRequestsError: past ``MAPSVC_RATE_FAILED_AUTH_PER_MIN`` (``Retry-After``).
        """
        limit = self.settings.rate_failed_auth_per_min
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
                max_failures=self.settings.rate_failed_auth_per_min,
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
        auth = self.settings
        window = {"window_s": auth.login_lock_s}
        by_address = f"login:{address}"
        by_login = f"login:{address}:{digest(login.strip().lower())}"
        # each attempt counts as a failure before its password is checked (~0.1 s), and is given
        # back if it succeeds: attempts made at once cannot pass the limits together
        allowed = await quotas.take_attempt(
            self.aredis, by_address, max_failures=auth.login_address_max_failures, **window
        )
        if not allowed.allowed:
            raise TooManyRequestsError(
                "too many failed logins from this address; try again later",
                retry_after_s=allowed.retry_after_s,
            )
        mine = await quotas.take_attempt(
            self.aredis, by_login, max_failures=auth.login_max_failures, **window
        )
        if not mine.allowed:
            await quotas.give_back(self.aredis, by_address)
            raise locked_error(mine.retry_after_s)
        try:
            user = await asyncio.to_thread(
                authenticate,
                self.engine,
                login,
                password,
                max_failures=auth.login_max_failures,
                lock_s=auth.login_lock_s,
                # it failed on this login lately (the attempt itself is counted already)
                address_failed=mine.remaining < mine.limit - 1,
            )
        except (UnauthorizedError, TooManyRequestsError):
            raise  # counted
        except BaseException:  # not the password's failure: nothing to count
            await quotas.give_back(self.aredis, by_address)
            await quotas.give_back(self.aredis, by_login)
            raise
        await quotas.give_back(self.aredis, by_address)
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
        A principal found is also kept in this process for ``LOCAL_S``: the credential of a busy
        caller costs no round trip to Redis on most of its requests.
        """
        now = time.monotonic()
        local = self._local.get(entry)
        if local is not None and local[0] > now:
            return local[1]
        found = await self._kept_in_redis(entry, look_up)
        if found is not None:
            self._local.pop(entry, None)  # re-inserted last: the dict's order is the age
            if len(self._local) >= _LOCAL_MAX:
                del self._local[next(iter(self._local))]
            self._local[entry] = (now + LOCAL_S, found)
        return found

    async def _kept_in_redis(
        self, entry: str, look_up: Callable[[], Awaitable[Principal | None]]
    ) -> Principal | None:
        """The principal kept in Redis under ``entry`` (see `_kept`), else looked up and kept."""
        generation, kept = await self.aredis.eval(_LOOKUP, 1, GENERATION_KEY, entry)
        name = f"{entry}:{_str(generation)}"
        if kept is not None:
            trusted, principal = _loads(self._seal_key, name, _str(kept))
            if trusted:
                return principal
        found = await look_up()
        await self.aredis.set(name, _dumps(self._seal_key, name, found), ex=KEPT_S)
        return found

    async def forget(self) -> None:
        """Retire every kept lookup (after a user, key or client changed): at once in Redis and
        in this process, within ``LOCAL_S`` in the others."""
        self._local.clear()
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
    body = f"{int(time.time()) + KEPT_S} {json.dumps(fields)}"
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
