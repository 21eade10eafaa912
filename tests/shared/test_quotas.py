"""The Redis rate limits against a real Redis: counting, refusal, reset, expiry, concurrency."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import pytest
import redis.asyncio as aioredis

from shared import quotas
from tests.conftest import REDIS_URL

pytestmark = pytest.mark.anyio


@pytest.fixture
async def client() -> AsyncIterator[aioredis.Redis]:
    # enough connections for the concurrent test's every hit at once
    redis = aioredis.Redis.from_url(REDIS_URL, decode_responses=True, max_connections=250)
    yield redis
    await redis.aclose()


@pytest.fixture
def key() -> str:
    """A key of this test alone (other sessions may share the Redis db)."""
    return f"test:{uuid.uuid4().hex}"


async def test_exactly_the_limit_passes_then_refused(client: aioredis.Redis, key: str) -> None:
    decisions = [await quotas.hit(client, key, 5, 60) for _ in range(7)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False] * 2
    assert [d.remaining for d in decisions] == [4, 3, 2, 1, 0, 0, 0]
    assert all(d.limit == 5 for d in decisions)
    refused = decisions[-1]
    # one hit drains in 60 / 5 = 12 s: the refused one waits for it, the whole limit for five
    assert 11 < refused.retry_after_s <= 12
    assert 59 < refused.reset_s <= 60
    assert decisions[0].retry_after_s == 0.0


async def test_cost_counts_and_a_refused_hit_is_not_counted(
    client: aioredis.Redis, key: str
) -> None:
    assert (await quotas.hit(client, key, 5, 60, cost=4)).remaining == 1
    refused = await quotas.hit(client, key, 5, 60, cost=2)
    assert not refused.allowed
    assert 11 < refused.retry_after_s <= 12  # one more hit must drain first
    assert (await quotas.hit(client, key, 5, 60)).allowed  # the refusal took nothing
    peek = await quotas.hit(client, key, 5, 60, cost=0)
    assert peek.allowed
    assert peek.remaining == 0


async def test_bad_limits_are_refused(client: aioredis.Redis, key: str) -> None:
    for limit, window_s, cost in ((0, 60, 1), (5, 0, 1), (5, 60, 6), (5, 60, -1)):
        with pytest.raises(ValueError, match="bad rate limit"):
            await quotas.hit(client, key, limit, window_s, cost)


async def test_limit_comes_back_after_the_window(client: aioredis.Redis, key: str) -> None:
    for _ in range(3):
        assert (await quotas.hit(client, key, 3, 1.0)).allowed
    refused = await quotas.hit(client, key, 3, 1.0)
    assert not refused.allowed
    assert 0 < refused.retry_after_s <= 1 / 3
    await asyncio.sleep(refused.retry_after_s + 0.02)
    assert (await quotas.hit(client, key, 3, 1.0)).allowed  # one drained
    assert not (await quotas.hit(client, key, 3, 1.0)).allowed
    await asyncio.sleep(1.05)
    assert [(await quotas.hit(client, key, 3, 1.0)).allowed for _ in range(4)] == [
        True,
        True,
        True,
        False,
    ]


async def test_keys_are_independent(client: aioredis.Redis, key: str) -> None:
    for _ in range(2):
        await quotas.hit(client, f"{key}:a", 2, 60)
    assert not (await quotas.hit(client, f"{key}:a", 2, 60)).allowed
    other = await quotas.hit(client, f"{key}:b", 2, 60)
    assert other.allowed
    assert other.remaining == 1


async def test_every_key_written_expires(client: aioredis.Redis, key: str) -> None:
    await quotas.hit(client, f"{key}:bucket", 3, 60)
    await quotas.hit(client, f"{key}:peeked", 3, 60, cost=0)  # only looks: writes nothing
    address = f"{key}:10.0.0.1"
    await quotas.failures_allowed(client, f"login:{address}", max_failures=3, window_s=60)
    await quotas.count_failure(client, f"login:{address}", max_failures=3, window_s=60)
    keys = sorted([k async for k in client.scan_iter(match=f"{quotas.PREFIX}*{key}*")])
    assert keys == [f"mapsvc:rate:login:{address}", f"mapsvc:rate:{key}:bucket"]
    for written in keys:
        assert 0 < await client.pttl(written) <= 60_000


async def test_concurrent_hits_never_pass_the_limit(client: aioredis.Redis, key: str) -> None:
    decisions = await asyncio.gather(*(quotas.hit(client, key, 10, 60) for _ in range(200)))
    assert sum(d.allowed for d in decisions) == 10
    assert sorted(d.remaining for d in decisions if d.allowed) == list(range(10))


async def test_a_bytes_client_works_too(key: str) -> None:
    raw = aioredis.Redis.from_url(REDIS_URL)  # responses not decoded
    try:
        assert (await quotas.hit(raw, key, 1, 60)).allowed
        assert not (await quotas.hit(raw, key, 1, 60)).allowed
    finally:
        await raw.aclose()


async def test_failures_close_a_caller_for_the_window(client: aioredis.Redis, key: str) -> None:
    address, other = f"{key}:192.0.2.1", f"{key}:192.0.2.2"
    allowed = partial(quotas.failures_allowed, client, max_failures=3, window_s=1.0)
    failure = partial(quotas.count_failure, client, max_failures=3, window_s=1.0)
    assert (await allowed(address)).remaining == 3
    after = [await failure(address) for _ in range(3)]
    assert [d.allowed for d in after] == [True, True, False]
    refused = await allowed(address)
    assert not refused.allowed
    assert 0 < refused.retry_after_s <= 1.0
    assert (await allowed(other)).allowed
    # the window is fixed from the first failure: still closed until it ends, whole
    await asyncio.sleep(0.5)
    assert not (await allowed(address)).allowed
    await asyncio.sleep(refused.retry_after_s - 0.5 + 0.05)
    reopened = await allowed(address)
    assert reopened.allowed
    assert reopened.remaining == 3


async def test_forgotten_failures_open_the_window_whole(client: aioredis.Redis, key: str) -> None:
    limits: dict[str, Any] = {"max_failures": 3, "window_s": 60.0}
    for _ in range(3):
        await quotas.count_failure(client, key, **limits)
    assert not (await quotas.failures_allowed(client, key, **limits)).allowed
    await quotas.forget_failures(client, key)
    reopened = await quotas.failures_allowed(client, key, **limits)
    assert (reopened.allowed, reopened.remaining) == (True, 3)
