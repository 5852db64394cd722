"""The retention sweep: chunks no live or suspended session and no open fork names, whose
last reference is older than retain_unreferenced_s, are deleted from the cache, in slices
(each its own commit, through the outbox, as a fork expiry's releases)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ramakv_daemon.commit.committer import GroupCommitter
from ramakv_daemon.commit.record import ChangeRecord
from ramakv_daemon.events.lanes import Lanes
from ramakv_daemon.events.outcome import Outcome
from ramakv_daemon.events.trace_records import TraceRecords
from ramakv_daemon.handlers.registry import NO_EFFECTS
from ramakv_daemon.ports import StoreError
from ramakv_daemon.routing.namespaces import Namespace, Namespaces
from ramakv_daemon.sweeps import loop
from ramakv_daemon.telemetry.metrics import DaemonMetrics

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
        self,
        window_s: float,
        namespaces: Namespaces,
        committer: GroupCommitter,
        records: TraceRecords,
        metrics: DaemonMetrics,
        clock: Callable[[], float],
        lanes: Lanes | None = None,
        slice_size: int = SLICE,
    ) -> None:
        """``lanes``: each slice waits for the background lane (client events first)."""
        self.lanes = lanes if lanes is not None else Lanes()
        self.window_s = window_s
        self.namespaces = namespaces
        self.committer = committer
        self.records = records
        self.metrics = metrics
        self.clock = clock
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
            async with self.lanes.background():
                if self.committer.busy:
                    await self.committer.barrier()  # never decide from a change in doubt
                now = self.clock()
                change = ns.manager.sweep_dead(now, self.slice_size)
                if change is None:
                    return deleted
                delta = self.records.delta(change, ns.key)  # before the await: this change's
                # Its trace record goes out at its commit (the committer's subscriber).
                o = Outcome("retention_sweep", None, change, ns, NO_EFFECTS, delta=delta)
                try:
                    await self.committer.submit(
                        ChangeRecord.of(ns.key, change, ns.manager, replies=(o,))
                    )
                except StoreError as err:
                    # Rolled back: still dead, looked at again by the next pass.
                    ns.manager.last_refs.released_now(change.evict_delete, "", now - self.window_s)
                    log.error("retention sweep not persisted (will retry): %s", err)
                    return deleted
            n = len(change.evict_delete)
            self.metrics.retention_deleted.inc(n)
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
