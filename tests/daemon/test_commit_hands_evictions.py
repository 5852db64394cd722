"""A group commit hands every change's evictions to delivery before any waiter resumes."""

from __future__ import annotations

from pathlib import Path

from ramakv_daemon.adapters.sqlite_store import SqliteSessionStore
from ramakv_daemon.committer import GroupCommitter
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
    seen: list[tuple[list[str], int]] = []
    committer = GroupCommitter(
        store, SessionManager(), on_evictions=lambda c, row: seen.append((c.evict_delete, row))
    )
    committer.start()
    try:
        first = committer.submit(Change(durable=True, evict_delete=["a", "b"]))
        second = committer.submit(Change(durable=True, evict_delete=["c"]))
        await first
        assert seen == [(["a", "b"], 1), (["c"], 1)]  # both, before the first waiter ran
        await second
    finally:
        await committer.close()
        await store.close()
