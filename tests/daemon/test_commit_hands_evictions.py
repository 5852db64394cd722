"""A group commit hands every change's evictions to delivery before any waiter resumes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.commit.committer import GroupCommitter
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.manager import SessionManager


class Recorder:
    """A submitter's ticket that records each change's evictions as they become durable."""

    def __init__(self, change: Change, seen: list[tuple[list[str], int]]) -> None:
        self.change, self.seen = change, seen

    def answer(self) -> None:
        return None

    def evictions_durable(self, row: int) -> None:
        self.seen.append((self.change.evict_delete, row))

    def committed(self) -> None:
        pass

    def rolled_back(self) -> None:
        pass


async def test_all_of_a_rows_evictions_are_registered_before_the_first_reply(
    tmp_path: Path,
) -> None:
    # Two changes share one commit and so one outbox row. If the first one's waiter could
    # resume (and its evictions be delivered, retiring the row) before the second change's
    # evictions were registered, a crash would lose those acknowledged evictions.
    store = SqliteSessionStore(str(tmp_path / "s.db"))
    await store.open()
    seen: list[tuple[list[str], int]] = []
    manager = SessionManager()
    committer = GroupCommitter(store, manager.fork_ids)
    committer.start()

    def submit(change: Change) -> asyncio.Future[None]:
        return committer.submit(change, manager, Recorder(change, seen))

    try:
        first = submit(Change(durable=True, evict_delete=["a", "b"]))
        second = submit(Change(durable=True, evict_delete=["c"]))
        await first
        assert seen == [(["a", "b"], 1), (["c"], 1)]  # both, before the first waiter ran
        await second
    finally:
        await committer.close()
        await store.close()
