"""Client events first: background work enters the pipeline a few at a time, yielding to clients."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

# Background events in flight at once. Each one's apply is a synchronous step (a 512-hash
# suspend is ~10 ms) and a read answered while commits are in doubt takes every uncommitted
# change out and back: with 64 in flight a client event waited behind ~1 s of sweep work
# after a restart (issue 33). Two still share a group commit with each other.
BACKGROUND_IN_FLIGHT = 2
# While client events are in flight, one background event is admitted per this many client
# events finished: background work gets a bounded share, and a sweep still ends under load.
CLIENT_SHARE = 8

T = TypeVar("T")
A = TypeVar("A")
B = TypeVar("B")


class Lanes:
    """Two lanes in front of the pipeline: a client lane that never waits here, and a
    background lane admitted only while no client event is in flight (or once every
    ``client_share`` client events under sustained load), ``in_flight`` at a time."""

    def __init__(self, in_flight: int = BACKGROUND_IN_FLIGHT, client_share: int = CLIENT_SHARE):
        if in_flight < 1 or client_share < 1:
            raise ValueError("in_flight and client_share must be at least 1")
        self.in_flight = in_flight
        self.client_share = client_share
        self.clients = 0  # client events in flight
        self.background_running = 0
        self.background_admitted = 0  # for tests and metrics: every background event let in
        self._served = 0  # client events finished since the last background admission
        self._waiting: deque[asyncio.Future[None]] = deque()

    @property
    def background_waiting(self) -> int:
        """Background events queued for admission."""
        return sum(1 for f in self._waiting if not f.done())

    @contextlib.contextmanager
    def client(self) -> Iterator[None]:
        """Marks a client event in flight for the block (entering never waits)."""
        self.clients += 1
        try:
            yield
        finally:
            self.clients -= 1
            self._served += 1
            self._admit()

    @contextlib.asynccontextmanager
    async def background(self) -> AsyncIterator[None]:
        """Waits for the background lane's turn, then holds one of its slots for the block."""
        if not self._may_admit() or self._waiting:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():  # admitted as it was cancelled
                    self._release()
                raise
        else:
            self._take()
        try:
            yield
        finally:
            self._release()

    def background_run(self, run: Callable[[A, B], Awaitable[T]]) -> Callable[[A, B], Awaitable[T]]:
        """``run`` (the pipeline's) with each call in the background lane."""

        async def in_background(payload: A, slot: B) -> T:
            async with self.background():
                return await run(payload, slot)

        return in_background

    def _may_admit(self) -> bool:
        if self.background_running >= self.in_flight:
            return False
        return self.clients == 0 or self._served >= self.client_share

    def _take(self) -> None:
        self.background_running += 1
        self.background_admitted += 1
        self._served = 0  # this admission spent the share clients earned

    def _release(self) -> None:
        self.background_running -= 1
        self._admit()

    def _admit(self) -> None:
        while self._waiting and self._may_admit():
            fut = self._waiting.popleft()
            if fut.done():  # its waiter was cancelled
                continue
            self._take()
            fut.set_result(None)
