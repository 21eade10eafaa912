"""The single-flight helper with real asyncio tasks: sharing, cancellation, errors."""

from __future__ import annotations

import asyncio

import pytest

from shared.singleflight import SingleFlight

pytestmark = pytest.mark.anyio


class Work:
    """Work that waits for ``release``, counting its runs, then returns or raises."""

    def __init__(self, error: Exception | None = None) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.runs = 0
        self.finished = 0
        self.error = error

    async def __call__(self) -> str:
        self.runs += 1
        self.started.set()
        await self.release.wait()
        self.finished += 1
        if self.error is not None:
            raise self.error
        return f"run {self.runs}"


async def test_callers_at_once_share_one_run() -> None:
    flight: SingleFlight[str] = SingleFlight()
    work = Work()
    callers = [asyncio.create_task(flight.run("k", work)) for _ in range(3)]
    await work.started.wait()
    work.release.set()
    assert await asyncio.gather(*callers) == ["run 1"] * 3
    assert work.runs == 1


async def test_a_cancelled_first_caller_cancels_neither_the_work_nor_the_others() -> None:
    flight: SingleFlight[str] = SingleFlight()
    work = Work()
    first = asyncio.create_task(flight.run("k", work))
    await work.started.wait()
    others = [asyncio.create_task(flight.run("k", work)) for _ in range(2)]
    await asyncio.sleep(0)  # the others are waiting too
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    work.release.set()
    assert await asyncio.gather(*others) == ["run 1", "run 1"]
    assert (work.runs, work.finished) == (1, 1)


async def test_the_work_ends_when_every_caller_is_gone() -> None:
    flight: SingleFlight[str] = SingleFlight()
    work = Work()
    caller = asyncio.create_task(flight.run("k", work))
    await work.started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    work.release.set()
    for _ in range(3):
        await asyncio.sleep(0)
    assert work.finished == 1
    # the key is free again: the next call runs the work anew
    assert await flight.run("k", work) == "run 2"


async def test_an_error_of_the_work_reaches_every_caller_then_frees_the_key() -> None:
    flight: SingleFlight[str] = SingleFlight()
    work = Work(ValueError("broken"))
    callers = [asyncio.create_task(flight.run("k", work)) for _ in range(3)]
    await work.started.wait()
    work.release.set()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert [type(r) for r in results] == [ValueError] * 3
    assert work.runs == 1
    work.error = None
    assert await flight.run("k", work) == "run 2"


async def test_other_keys_run_apart() -> None:
    flight: SingleFlight[str] = SingleFlight()
    work = Work()
    work.release.set()
    assert await asyncio.gather(flight.run("a", work), flight.run("b", work)) == [
        "run 1",
        "run 2",
    ]
