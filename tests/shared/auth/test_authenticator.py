"""The authenticator without the API: lookups kept and retired, the auth engine's timeout."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import redis
import redis.asyncio as aioredis
from sqlalchemy import Engine, text

from shared.auth.authenticator import (
    LOCAL_S,
    Authenticator,
    Credentials,
    auth_engine,
    forget_kept,
)
from shared.auth.keys import create_key, revoke_key
from shared.auth.tokens import SigningKeys
from shared.errors import UnauthorizedError
from shared.settings import AuthSettings, Settings
from tests.conftest import REDIS_URL

KEYS = SigningKeys.parse([f"test:{secrets.token_hex(32)}"])


@pytest.fixture
async def aredis() -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(REDIS_URL)
    yield client
    await client.aclose()


def address() -> str:
    """An address of its own for one test (its counts outlive the test)."""
    return f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.{secrets.randbelow(250)}"


@dataclass(frozen=True)
class KeptKey:
    """A key the authenticator has found and keeps, revoked in the database since."""

    auth: Authenticator
    credentials: Credentials
    here: str
    principal_id: str

    async def principal(self) -> str:
        """The id of the principal the authenticator finds for the key now."""
        return (await self.auth.principal(self.credentials, self.here)).id


@pytest.fixture
async def kept_key(engine: Engine, aredis: aioredis.Redis) -> KeptKey:
    auth = Authenticator(AuthSettings(_env_file=None), engine, aredis, KEYS)  # type: ignore[call-arg]
    key, secret = create_key(engine, "kept", "reader")
    kept = KeptKey(auth, Credentials("key", secret), address(), f"key:{key.id}")
    assert await kept.principal() == kept.principal_id
    revoke_key(engine, key.id)
    return kept


@pytest.mark.anyio
async def test_a_kept_key_lasts_until_the_cli_retires_every_kept_lookup(kept_key: KeptKey) -> None:
    assert await kept_key.principal() == kept_key.principal_id  # kept
    with redis.Redis.from_url(REDIS_URL) as client:
        forget_kept(client)  # what `mapsvc key revoke` does, from another process
    # this process trusts what it found a moment longer, then asks Redis again
    assert await kept_key.principal() == kept_key.principal_id
    await asyncio.sleep(LOCAL_S)
    with pytest.raises(UnauthorizedError):
        await kept_key.principal()


@pytest.mark.anyio
async def test_forget_retires_what_the_process_keeps_at_once(kept_key: KeptKey) -> None:
    await kept_key.auth.forget()  # what the admin routes do after a change
    with pytest.raises(UnauthorizedError):
        await kept_key.principal()


def test_the_auth_engine_has_a_statement_timeout_of_its_own(settings: Settings) -> None:
    mine = settings.model_copy(update={"auth_statement_timeout_ms": 1234})
    assert mine.auth.statement_timeout_ms != mine.vector.statement_timeout_ms
    engine = auth_engine(mine)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SHOW statement_timeout")).scalar() == "1234ms"
    finally:
        engine.dispose()
