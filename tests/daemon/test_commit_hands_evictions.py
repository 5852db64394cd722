"""A group commit tells its subscribers what it committed (the ledger: every change's
evictions for delivery) before any waiter resumes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.commit.committer import GroupCommitter
from ramakv_daemon.commit.ledger import OutboxLedger
from ramakv_daemon.commit.record import ChangeRecord, Committed, Fenced, Subscriber
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.ports import StoreFenced, WriteBatch


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


class _Fencing(SqliteSessionStore):
    """Refuses its next write as a fence would (another node changed session "s")."""

    fence_next = False

    async def write(self, batch: WriteBatch) -> None:
        if self.fence_next:
            self.fence_next = False
            raise StoreFenced(("s",))
        await super().write(batch)


async def test_a_commit_tells_its_subscribers_what_it_committed_before_any_waiter(
    tmp_path: Path,
) -> None:
    # Subscribers are given at construction, told in order, before a waiter resumes: the
    # records in apply order and the row of their namespace; a fence, the sessions.
    store = _Fencing(str(tmp_path / "s.db"))
    await store.open()
    manager, ledger = SessionManager(), OutboxLedger()
    told: list[object] = []

    class Told(Subscriber):
        def on_committed(self, c: Committed) -> None:
            told.append(c)

        def on_fenced(self, f: Fenced) -> None:
            told.append(f)

    committer = GroupCommitter(store, manager.fork_ids, ledger, subscribers=(Told(),))
    committer.start()
    try:
        a = ChangeRecord.of("", manager.turn_end("s", ["x"], 1.0), manager)
        b = ChangeRecord.of("", Change(durable=True, evict_delete=["y"]), manager)
        first, second = committer.submit(a), committer.submit(b)
        await first
        assert told == [Committed([a, b], {"": 1})]
        assert ledger.take("") == [(1, ["y"], [], [])]  # the ledger is a subscriber too
        await second
        store.fence_next = True
        fenced = committer.submit(ChangeRecord.of("", manager.turn_end("s", ["z"], 2.0), manager))
        with pytest.raises(StoreFenced):
            await fenced
        assert told[1:] == [Fenced(("s",))]
        assert set(manager.sessions["s"].unique_hashes()) == {"x"}  # undone
    finally:
        await committer.close()
        await store.close()
