"""Client events first: background work enters the pipeline a few at a time, yielding to clients."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator

from ramakv_daemon.ports import BACKGROUND

# Background events in flight at once. Each one's apply is a synchronous step (a 512-hash
# suspend is ~10 ms) and a read answered while commits are in doubt takes every uncommitted
# change out and back: with 64 in flight a client event waited behind ~1 s of sweep work
# after a restart (issue 33). Two still share a group commit with each other.
BACKGROUND_IN_FLIGHT = 1
# While client events are in flight, one background event is admitted per this many client
# events finished: background work gets a bounded share, and a sweep still ends under load.
CLIENT_SHARE = 8
# While clients are active (one finished in the last RECENT_CLIENT_S), background work takes
# at most this share of the loop: after an event whose span cost the loop's thread t seconds
# of CPU, the lane stays shut for t * (1 - share) / share, so client events find the loop
# free most of the time. CPU, not wall time: a commit written off the loop, or the OS giving
# the core to another process, costs the loop nothing. With no client about, background work
# runs at full speed.
BACKGROUND_SHARE = 0.5
RECENT_CLIENT_S = 1.0
MAX_PAUSE_S = 0.25  # one slow background event never shuts the lane for longer


class Lanes:
    """Two lanes in front of the pipeline: a client lane that never waits here, and a
    background lane admitted only while no client event is in flight (or once every
    ``client_share`` client events under sustained load), ``in_flight`` at a time."""

    def __init__(
        self,
        in_flight: int = BACKGROUND_IN_FLIGHT,
        client_share: int = CLIENT_SHARE,
        share: float = BACKGROUND_SHARE,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.thread_time,
    ):
        """``share``: the share of the loop background work gets while clients are active
        (1.0: no pause); ``clock``: monotonic seconds; ``cpu_clock``: the loop thread's CPU
        seconds (tests inject both)."""
        if in_flight < 1 or client_share < 1:
            raise ValueError("in_flight and client_share must be at least 1")
        if not 0 < share <= 1:
            raise ValueError("share must be in (0, 1]")
        self.in_flight = in_flight
        self.client_share = client_share
        self.share = share
        self.clock = clock
        self.cpu_clock = cpu_clock
        self._last_client = -math.inf
        self._shut_until = -math.inf  # the pause after a background event
        self._reopen: asyncio.TimerHandle | None = None
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
            self.client_done()

    def client_done(self) -> None:
        """A client event counted in ``clients`` (by :meth:`client`, or by the service
        itself: a plain try/finally costs every event less than the context manager)
        has finished."""
        self.clients -= 1
        self._served += 1
        self._last_client = self.clock()
        self._admit()

    @contextlib.asynccontextmanager
    async def background(self) -> AsyncIterator[None]:
        """Waits for the background lane's turn, then holds one of its slots for the block."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)  # behind those waiting already (cancelled ones are skipped)
        self._admit()
        if not fut.done():
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():  # admitted as it was cancelled
                    self._release()
                raise
        began = self.cpu_clock()
        token = BACKGROUND.set(True)  # its commit may be written off the loop
        try:
            yield
        finally:
            BACKGROUND.reset(token)
            self._pause(self.cpu_clock() - began)
            self._release()

    def _pause(self, took: float) -> None:
        """After a background event whose span took ``took`` s of the loop's CPU: shut the
        lane for its pause while clients are active, and open it again when it ends."""
        now = self.clock()
        if self.share >= 1 or now - self._last_client > RECENT_CLIENT_S:
            return
        pause = min(MAX_PAUSE_S, took * (1 - self.share) / self.share)
        self._shut_until = max(self._shut_until, now + pause)
        if self._reopen is None:
            loop = asyncio.get_running_loop()
            self._reopen = loop.call_later(pause, self._reopened)

    def _reopened(self) -> None:
        self._reopen = None
        left = self._shut_until - self.clock()
        if left > 0:
            self._reopen = asyncio.get_running_loop().call_later(left, self._reopened)
            return
        self._admit()

    def _may_admit(self) -> bool:
        if self.background_running >= self.in_flight or self.clock() < self._shut_until:
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
