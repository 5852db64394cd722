"""The unit of work every applied change commits through, and what is still in doubt."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ramakv_daemon.commit.committer import GroupCommitter
from ramakv_daemon.commit.record import ChangeRecord, Reply
from ramakv_daemon.core.change import Change
from ramakv_daemon.routing.namespaces import Namespace


class UnitOfWork:
    """Commits one applied change: the keep it needs, its record, the commit it awaits
    (StoreError: rolled back, memory as the database holds it). What it committed is told
    by the committer's Committed (delivery's rows, the trace records of its replies). The
    pipeline's events and the bus's commands alike; reads ask it what is in doubt."""

    __slots__ = ("committer",)

    def __init__(self, committer: GroupCommitter) -> None:
        self.committer = committer

    @property
    def busy(self) -> bool:
        """True while some change is not yet committed or rolled back."""
        return self.committer.busy

    async def settled(self) -> None:
        """Wait for every change in doubt: what follows decides from committed state."""
        if self.committer.busy:
            await self.committer.barrier()

    def uncommitted(self, namespace: str) -> list[Change]:
        """``namespace``'s changes in doubt, oldest first."""
        return self.committer.uncommitted(namespace)

    async def commit(
        self,
        ns: Namespace,
        change: Change,
        replies: Sequence[Reply] = (),
        ready: asyncio.Future[bool] | None = None,
    ) -> None:
        """Commit ``change`` of ``ns``, just applied (before any await: its rows as they
        stand now are its own). The eviction path starts here: a chunk it references again
        while its evict may still act gets a keep its commit waits for (the gate); its own
        evictions go to the outbox in its commit, and delivery takes them from there.
        ``ready``: what completes its replies (a debug file), waited for a while."""
        keep = ns.dispatcher.keep_for(change.prev_counts) if change.durable else None
        record = ChangeRecord.of(
            ns.key,
            change,
            ns.manager,
            kept=keep[1] if keep is not None else (),
            replies=replies,
            gate=keep[0] if keep is not None else None,
            ready=ready,
        )
        await self.committer.submit(record)
