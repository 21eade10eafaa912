"""Each caller's share of the database: at most a few of its requests hold PostgreSQL
connections at once (``MAPSVC_DB_STATEMENTS_PER_CALLER``, per API process), so that one caller
never empties the pool others need.

A request of an endpoint that queries the database (``Endpoint.database``) takes one of its
caller's slots before its handler runs and gives it back once its answer is sent (a streamed
GeoJSON answer holds its connection while it streams). Past the caller's slots it waits up to
:data:`WAIT_S`, then gets ``429`` with ``Retry-After``: GeoServer's control flow, per user.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from shared.errors import TooManyRequestsError

__all__ = ["WAIT_S", "DatabaseShares", "Held", "HeldWhileSent"]

#: how long a request waits for one of its caller's slots before its 429
WAIT_S = 1.0


@dataclass
class _Caller:
    slots: asyncio.Semaphore
    #: requests holding or waiting for a slot (the entry goes with the last)
    requests: int = 0


@dataclass
class DatabaseShares:
    """The slots of each caller (a principal's id, or ``address:<ip>``)."""

    per_caller: int
    wait_s: float = WAIT_S
    _callers: dict[str, _Caller] = field(default_factory=dict)

    async def take(self, caller: str) -> Held:
        """One of ``caller``'s slots, to give back with :meth:`Held.release`.

        Raises:
            TooManyRequestsError: none was free within ``wait_s``.
        """
        entry = self._callers.get(caller)
        if entry is None:
            entry = self._callers[caller] = _Caller(asyncio.Semaphore(self.per_caller))
        entry.requests += 1
        try:
            async with asyncio.timeout(self.wait_s):
                await entry.slots.acquire()
        except BaseException as exc:
            self._leave(caller, entry)
            if isinstance(exc, TimeoutError):
                raise TooManyRequestsError(
                    f"too many database requests at once: at most {self.per_caller} per caller",
                    retry_after_s=1,
                ) from None
            raise
        return Held(self, caller, entry)

    def _leave(self, caller: str, entry: _Caller) -> None:
        entry.requests -= 1
        if entry.requests == 0:
            del self._callers[caller]


@dataclass
class Held:
    """A slot taken; :meth:`release` gives it back (once)."""

    shares: DatabaseShares
    caller: str
    entry: _Caller
    released: bool = False

    def release(self) -> None:
        """Give the slot back (a second call does nothing)."""
        if not self.released:
            self.released = True
            self.entry.slots.release()
            self.shares._leave(self.caller, self.entry)  # noqa: SLF001


class HeldWhileSent:
    """An answer (ASGI) that gives its slot back once it is sent, or the client went away."""

    def __init__(self, response: Response, held: Held) -> None:
        self.response = response
        self.held = held

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the answer, then give the slot back."""
        try:
            await self.response(scope, receive, send)
        finally:
            self.held.release()
