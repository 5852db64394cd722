"""A circuit breaker for waits on the daemon's answers: a timeout opens it, and while it
is open no request waits on the daemon at all; it lets one wait through again after a
back-off that doubles on each failed try. Waits are bounded on the lifecycle's clock."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from ramakv_sdk.lifecycle.clock import Clock

log = logging.getLogger("ramakv_proxy")
T = TypeVar("T")

BASE_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0


class Breaker:
    """Closed (waits allowed) until a wait times out; then open for a back-off."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.backoff_s = BASE_BACKOFF_S
        self.open_until: float | None = None
        self.opens = 0

    @property
    def is_open(self) -> bool:
        return self.open_until is not None and self.clock.now() < self.open_until

    def allow(self) -> bool:
        """Whether a request may wait on the daemon now (closed, or a retry is due)."""
        return not self.is_open

    def success(self) -> None:
        if self.open_until is not None:
            log.info("daemon answers again: waits on it resume")
        self.open_until = None
        self.backoff_s = BASE_BACKOFF_S

    def failure(self) -> None:
        retrying = self.open_until is not None
        self.open_until = self.clock.now() + self.backoff_s
        self.opens += 1
        log.warning(
            "daemon did not answer in time%s: no request waits on it for %.3g s",
            " again" if retrying else "",
            self.backoff_s,
        )
        self.backoff_s = min(MAX_BACKOFF_S, self.backoff_s * 2)


async def bounded(clock: Clock, seconds: float, aw: Awaitable[T]) -> tuple[bool, T | None]:
    """``(True, result)`` if ``aw`` finished within ``seconds`` of ``clock``, else
    ``(False, None)`` with ``aw`` cancelled (a shielded future goes on)."""
    task = asyncio.ensure_future(aw)
    if seconds <= 0 and not task.done():
        task.cancel()
        return False, None
    timer = clock.call_later(seconds, lambda: _cancel(task))
    try:
        return True, await task
    except asyncio.CancelledError:
        if task.cancelled() and not _cancelling():
            return False, None
        raise
    finally:
        timer.cancel()


def _cancel(task: asyncio.Future[Any]) -> None:
    task.cancel()


def _cancelling() -> bool:
    """The current task itself is being cancelled (not only the awaited one)."""
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0
