"""Single flight: callers asking for one key at once share one run of the work."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["SingleFlight"]

T = TypeVar("T")


class SingleFlight(Generic[T]):
    """Runs of work by key, shared by the callers that ask for a key while its work runs.

    The work runs in a task of its own: a caller that is cancelled (its client went away)
    stops waiting, but the work goes on for the others and none of them sees the
    cancellation. What the work returns or raises reaches every caller still waiting. The
    key is free again once the work ends, so a later call runs the work anew.
    """

    def __init__(self) -> None:
        self._running: dict[Hashable, asyncio.Task[T]] = {}

    async def run(self, key: Hashable, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """The result of ``work()``, run once for every caller asking for ``key`` meanwhile.

        Args:
            key: what the work makes; callers with equal keys share one run.
            work: makes the result; called only when no work for ``key`` is running.

        Returns:
            What the shared run of the work returned.

        Raises:
            Exception: whatever the shared run of the work raised.
        """
        task = self._running.get(key)
        if task is None:
            task = asyncio.create_task(work())
            self._running[key] = task
            task.add_done_callback(functools.partial(self._forget, key))
        return await asyncio.shield(task)

    def _forget(self, key: Hashable, task: asyncio.Task[T]) -> None:
        # runs before any waiter wakes up, so a call after the end starts afresh
        if self._running.get(key) is task:
            del self._running[key]
        if not task.cancelled():
            task.exception()  # retrieved here: no "never retrieved" warning without waiters
