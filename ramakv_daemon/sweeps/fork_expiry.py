"""Fork holds past fork_hold_ttl_s are released as their fork_end would: a subagent that
never sent its session_fork_end must not hold its chunks for ever."""

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
from ramakv_daemon.telemetry.log_text import loggable
from ramakv_daemon.telemetry.metrics import DaemonMetrics

log = logging.getLogger("ramakv")


class ForkExpiry:
    """Expires old fork holds at start-up and then every ttl/10 (1 s to 60 s)."""

    def __init__(
        self,
        ttl_s: float,
        namespaces: Namespaces,
        committer: GroupCommitter,
        records: TraceRecords,
        metrics: DaemonMetrics,
        clock: Callable[[], float],
        lanes: Lanes | None = None,
    ) -> None:
        """``lanes``: each namespace's expiry waits for the background lane (clients first)."""
        self.ttl_s = ttl_s
        self.namespaces = namespaces
        self.committer = committer
        self.records = records
        self.metrics = metrics
        self.clock = clock
        self.lanes = lanes if lanes is not None else Lanes()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Expire the holds that expired while the daemon was down, then keep looking."""
        if self.ttl_s <= 0:
            return
        await self.expire_forks()
        self._task = asyncio.get_running_loop().create_task(self._forever(), name="fork-expiry")

    async def close(self) -> None:
        await loop.stop(self._task)

    async def expire_forks(self) -> int:
        """Release every fork hold older than fork_hold_ttl_s, as its fork_end would.

        Each expiry is logged at WARNING (a subagent that never sent its fork_end) and
        published on the trace as a ``fork_expire`` event. Returns how many expired.
        """
        total = 0
        for ns in list(self.namespaces):
            if not len(ns.manager.forks):
                continue
            async with self.lanes.background():
                total += await self._expire(ns)
        return total

    async def _expire(self, ns: Namespace) -> int:
        """One namespace's expired holds, as one change (one commit); how many expired."""
        ttl = self.ttl_s
        if self.committer.busy:
            await self.committer.barrier()  # never decide from a change still in doubt
        change = ns.manager.expire_forks(self.clock(), ttl)
        if change is None:
            return 0
        delta = self.records.delta(change, ns.key)  # before the await: this change's
        expired = change.data["expired"]
        assert isinstance(expired, list)
        touched = sorted({str(r["session_id"]) for r in expired})
        # Its trace record goes out at its commit (the committer's subscriber).
        o = Outcome("fork_expire", None, change, ns, NO_EFFECTS, delta=delta, touched=touched)
        try:
            await self.committer.submit(ChangeRecord.of(ns.key, change, ns.manager, replies=(o,)))
        except StoreError as err:  # rolled back: the next pass tries again
            log.error("fork expiry not persisted (will retry): %s", err)
            return 0
        for row in expired:
            log.warning(
                "fork hold expired: session=%s fork_id=%s age=%.0fs (older than "
                "fork_hold_ttl_s=%g; its session_fork_end never came)%s",
                loggable(str(row["session_id"])),
                row["fork_id"],
                row["age_s"],
                ttl,
                f" namespace={ns.key}" if ns.key else "",
            )
        self.metrics.forks_expired.inc(len(expired))
        return len(expired)

    async def _forever(self) -> None:
        interval = min(60.0, max(1.0, self.ttl_s / 10))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.expire_forks()
            except Exception:  # the loop must outlive one bad pass
                log.exception("fork expiry pass failed")
