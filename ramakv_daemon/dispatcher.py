"""Carries a committed change's prefetches and evictions to the backend, off the reply path."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.ports import Backend, BackendResult, EvictMode

log = logging.getLogger("ramakv.backend")


class BackendDispatcher:
    """Sends backend calls in background tasks so a slow cache never delays a reply.

    An eviction is re-checked against the refcount table when it is sent: a chunk that
    became referenced again in between is never evicted.
    """

    def __init__(
        self,
        backend: Backend,
        manager: SessionManager,
        on_result: Callable[[str, int, BackendResult], None] | None = None,
    ) -> None:
        self.backend = backend
        self.manager = manager
        self.on_result = on_result
        self._tasks: set[asyncio.Task[None]] = set()

    def dispatch(
        self, session_id: str | None, prefetch: list[str], delete: list[str], demote: list[str]
    ) -> None:
        """Schedule the calls for one committed event."""
        if not (prefetch or delete or demote):
            return
        task = asyncio.get_running_loop().create_task(
            self._send(session_id, prefetch, delete, demote)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(
        self, session_id: str | None, prefetch: list[str], delete: list[str], demote: list[str]
    ) -> None:
        for mode, hashes in ((EvictMode.DELETE, delete), (EvictMode.DEMOTE, demote)):
            still_free = [h for h in hashes if h not in self.manager.refcounts]
            if still_free:
                result = await self.backend.evict(still_free, mode)
                self._report(f"evict_{mode.value}", len(still_free), result)
        if prefetch:
            result = await self.backend.prefetch(prefetch, f"prefetch_{session_id}")
            self._report("prefetch", len(prefetch), result)

    def _report(self, op: str, count: int, result: BackendResult) -> None:
        if not result.ok:
            log.warning(
                "backend %s of %d chunks failed: status=%s %s",
                op, count, result.status, result.detail,
            )
        if self.on_result is not None:
            self.on_result(op, count, result)

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait for in-flight calls (shutdown, tests)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)
