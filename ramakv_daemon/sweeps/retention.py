"""The retention sweep: chunks no live or suspended session and no open fork names, whose
last reference is older than retain_unreferenced_s, are deleted from the cache, in slices
(each its own commit, through the outbox, as a fork expiry's releases): the timer and
the passes; the bus's DeleteDead handler deletes each slice."""

from __future__ import annotations

import asyncio
import logging

from ramakv_daemon.bus.commands import DeleteDead
from ramakv_daemon.bus.messagebus import MessageBus
from ramakv_daemon.routing.namespaces import Namespace, Namespaces
from ramakv_daemon.sweeps import loop

log = logging.getLogger("ramakv")

# Chunks per commit: a few hundred keeps each step of the loop short and each outbox row
# small, and a backlog of dead chunks still leaves in seconds.
SLICE = 500


def interval_of(window_s: float) -> float:
    """A tenth of the window, 1 s to 60 s: a dead chunk is deleted at most that late."""
    return min(60.0, max(1.0, window_s / 10))


class RetentionSweep:
    """Deletes dead chunks at start-up's first pass and then every interval; one pass at
    a time. The evidence (core/last_refs.py) lives in each namespace's manager."""

    def __init__(
        self, window_s: float, namespaces: Namespaces, bus: MessageBus, slice_size: int = SLICE
    ) -> None:
        """``bus``: each slice is one DeleteDead command (its handler, bus/handlers.py,
        deletes and commits it in the background lane: client events first)."""
        self.window_s = window_s
        self.namespaces = namespaces
        self.bus = bus
        self.slice_size = slice_size
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the loop (nothing is dead at start-up: a restart knows only named chunks)."""
        self._task = asyncio.get_running_loop().create_task(self._forever(), name="retention")

    async def close(self) -> None:
        await loop.stop(self._task)

    async def sweep(self) -> int:
        """One pass over every namespace that delivers: how many chunks were deleted."""
        async with self._lock:
            total = 0
            for ns in list(self.namespaces):
                if ns.delivers and len(ns.manager.last_refs):
                    total += await self._sweep_namespace(ns)
            if total:
                log.info(
                    "retention: %d chunks deleted (named by no one for %gs, retain_unreferenced_s)",
                    total,
                    self.window_s,
                )
            return total

    async def _sweep_namespace(self, ns: Namespace) -> int:
        deleted = 0
        while True:
            n = await self.bus.handle(DeleteDead(ns.key, self.window_s, self.slice_size))
            if n is None:  # none left, or not committed (looked at again by the next pass)
                return deleted
            deleted += n
            await asyncio.sleep(0)  # a slice per loop step: events run in between

    async def _forever(self) -> None:
        interval = interval_of(self.window_s)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except Exception:  # the loop must outlive one bad pass
                log.exception("retention sweep failed")
