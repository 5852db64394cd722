"""The lifecycle's time: the event loop's clock, or a manual one that tests advance."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    """A scheduled callback that can be cancelled (asyncio.TimerHandle is one)."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """Monotonic seconds, one-shot timers and sleeps, all on one event loop."""

    def now(self) -> float: ...

    def wall(self) -> float:
        """Seconds since the epoch (deadlines written to disk outlive the monotonic clock)."""
        ...

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer: ...

    async def sleep(self, delay: float) -> None: ...


class LoopClock:
    """The running event loop's monotonic clock and timers (the proxy's default)."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def wall(self) -> float:
        return time.time()

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(delay, fn)

    async def sleep(self, delay: float) -> None:
        await asyncio.sleep(delay)


class _ManualTimer:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """Time that moves only when :meth:`advance` is called (deterministic tests).

    Timers due by the new time run in time order inside ``advance``; sleepers due by
    then are woken (they resume when the caller next yields to the loop). A sleep never
    ends by itself: code that polls with it (the restore wait against a real cache) waits
    until the test advances the clock.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._seq = itertools.count()
        self._due: list[tuple[float, int, _ManualTimer, Callable[[], None]]] = []

    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._now

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer:
        timer = _ManualTimer()
        heapq.heappush(self._due, (self._now + max(delay, 0.0), next(self._seq), timer, fn))
        return timer

    async def sleep(self, delay: float) -> None:
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        self.call_later(delay, wake)
        await woken

    @property
    def pending(self) -> int:
        """Timers not yet due and not cancelled."""
        return sum(1 for _, _, t, _ in self._due if not t.cancelled)

    def advance(self, seconds: float) -> None:
        """Move time forward, running every timer that falls due on the way."""
        until = self._now + seconds
        while self._due and self._due[0][0] <= until:
            when, _, timer, fn = heapq.heappop(self._due)
            self._now = max(self._now, when)
            if not timer.cancelled:
                fn()
        self._now = until
