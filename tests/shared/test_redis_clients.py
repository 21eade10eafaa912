"""The API's Redis client for short commands: a burst of requests waits for a connection."""

from __future__ import annotations

import asyncio

from shared.redis_clients import async_client
from tests.conftest import REDIS_URL


def test_a_burst_of_commands_past_the_pool_waits_its_turn() -> None:
    """500 commands at once on a pool of 100 connections all answer (redis-py's own pool
    raised ``Too many connections`` past the hundredth: the API answered ``503``)."""

    async def burst() -> list[int]:
        client = async_client(REDIS_URL)
        try:
            counts = await asyncio.gather(*[client.incr("test:burst") for _ in range(500)])
            await client.delete("test:burst")
            return counts
        finally:
            await client.aclose()

    assert sorted(asyncio.run(burst())) == list(range(1, 501))
