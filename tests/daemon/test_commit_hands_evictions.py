"""A group commit leaves every change's evictions for delivery before any waiter resumes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.commit.committer import GroupCommitter
from ramakv_daemon.commit.ledger import OutboxLedger
from ramakv_daemon.commit.record import ChangeRecord
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.manager import SessionManager


async def test_all_of_a_rows_evictions_are_registered_before_the_first_reply(
    tmp_path: Path,
) -> None:
    # Two changes share one commit and so one outbox row. If the first one's waiter could
    # resume (and its evictions be delivered, retiring the row) before the second change's
    # evictions were registered, a crash would lose those acknowledged evictions.
    store = SqliteSessionStore(str(tmp_path / "s.db"))
    await store.open()
    manager, ledger = SessionManager(), OutboxLedger()
    committer = GroupCommitter(store, manager.fork_ids, ledger)
    committer.start()

    def submit(change: Change) -> asyncio.Future[None]:
        return committer.submit(ChangeRecord.of("", change, manager))

    try:
        first = submit(Change(durable=True, evict_delete=["a", "b"]))
        second = submit(Change(durable=True, evict_delete=["c"]))
        await first
        # both, before it ran (delete, demote, cold)
        assert ledger.take("") == [(1, ["a", "b"], [], []), (1, ["c"], [], [])]
        await second
    finally:
        await committer.close()
        await store.close()
