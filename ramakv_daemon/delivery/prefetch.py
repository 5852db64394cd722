"""Best-effort calls off the reply path: prefetches (limited in flight) and budget demotions."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine

from ramakv_daemon.ports import Backend, BackendResult, EvictMode

log = logging.getLogger("ramakv.backend")

MAX_BATCH = 1000
# Prefetches are best effort: past this many in flight (a hung cache) new ones are dropped
# (counted) instead of piling up tasks and connections.
MAX_PREFETCHES_IN_FLIGHT = 64

Report = Callable[[str, int, BackendResult], None]


class Prefetcher:
    """Sends prefetches and budget demotions once, in the background, never retried."""

    def __init__(
        self,
        backend: Backend,
        report: Report,
        on_result: Callable[[str, int, BackendResult], None] | None,
    ) -> None:
        """``report``: each call's result (logged and counted); ``on_result``: a dropped
        prefetch's (counted, never sent)."""
        self.backend = backend
        self.report = report
        self.on_result = on_result
        self.tasks: set[asyncio.Task[None]] = set()
        self._prefetching = 0
        self._drop_logged = 0.0

    def prefetch(self, session_id: str | None, hashes: list[str]) -> None:
        """Send one prefetch in the background."""
        if not hashes:
            return
        if self._prefetching >= MAX_PREFETCHES_IN_FLIGHT:
            dropped = BackendResult(
                False, 0, f"dropped: {MAX_PREFETCHES_IN_FLIGHT} prefetches still in flight"
            )
            if self.on_result is not None:
                self.on_result("prefetch", len(hashes), dropped)
            now = time.monotonic()
            if now - self._drop_logged >= 10.0:  # one line per 10 s, not one per event
                self._drop_logged = now
                log.warning("prefetch of %d chunks %s", len(hashes), dropped.detail)
            return
        self._prefetching += 1
        task = self._spawn(self._prefetch(session_id, hashes))
        task.add_done_callback(self._prefetch_done)

    def _prefetch_done(self, _task: asyncio.Task[None]) -> None:
        self._prefetching -= 1

    def demote(self, hashes: list[str]) -> None:
        """Budget demotion of still-referenced chunks (DDR -> disk), best effort.

        Not in the outbox: losing one to a crash only leaves a chunk in DDR, and the
        outbox's re-check would (rightly) drop an eviction of a referenced chunk.
        """
        if hashes:
            self._spawn(self._demote(hashes))

    def _spawn(self, work: Coroutine[None, None, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _demote(self, hashes: list[str]) -> None:
        for i in range(0, len(hashes), MAX_BATCH):
            part = hashes[i : i + MAX_BATCH]
            result = await self.backend.evict(part, EvictMode.DEMOTE)
            self.report("budget_demote", len(part), result)

    async def _prefetch(self, session_id: str | None, hashes: list[str]) -> None:
        for i in range(0, len(hashes), MAX_BATCH):
            part = hashes[i : i + MAX_BATCH]
            result = await self.backend.prefetch(part, f"prefetch_{session_id}")
            self.report("prefetch", len(part), result)

    async def drain(self, timeout: float) -> None:
        """Wait for the calls in flight (shutdown, tests)."""
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=timeout)
