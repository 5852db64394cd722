"""Store contract: a failed write changes nothing; misuse raises StoreError."""

from __future__ import annotations

import pytest
from support.store_adapters import StoreHome

from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.session import Session
from ramakv_daemon.ports import (
    AnswerRow,
    EvictMode,
    OutboxRow,
    SessionStore,
    StoreError,
    WriteBatch,
)

BEFORE = Session("kept", ("a",), 1)


async def _everything_then_a_duplicate_row(store: SessionStore) -> None:
    """One write touching every table, failing at its end on a duplicate outbox row id."""
    await store.write(
        WriteBatch(
            {"kept": Session("kept", ("changed",), 9), "new": Session("new", ("n",)), "gone": None},
            outbox_add=[
                OutboxRow(2, "", (("z", EvictMode.DELETE),)),
                OutboxRow(1, "", (("dup", EvictMode.DELETE),)),
            ],
            outbox_done=[1],
            event_ids=[AnswerRow("e-new", "{}", 9.0, "")],
            prune_event_ids_before=100.0,
            forks={1: None, 2: Fork(2, "kept", ("a",), 2.0)},
            next_fork_id=50,
        )
    )


async def test_a_failed_write_changes_nothing(home: StoreHome) -> None:
    store = await home.opened()
    fork = Fork(1, "kept", ("a",), 1.0)
    await store.write(
        WriteBatch(
            {"kept": BEFORE, "gone": Session("gone", ("g",))},
            outbox_add=[OutboxRow(1, "", (("a", EvictMode.DELETE),))],
            event_ids=[AnswerRow("e-old", '{"ok": true}', 1.0, "dig")],
            forks={1: fork},
            next_fork_id=2,
        )
    )
    with pytest.raises(StoreError):
        await _everything_then_a_duplicate_row(store)
    await _check_unchanged(store, fork)
    await store.close()
    await _check_unchanged(await home.opened(), fork)  # and after a restart


async def _check_unchanged(seen: SessionStore, fork: Fork) -> None:
    assert sorted(await seen.load_all(), key=lambda s: s.session_id) == [
        Session("gone", ("g",)),
        BEFORE,
    ]
    assert await seen.load_outbox() == [(1, "", (("a", "delete"),))]
    assert await seen.load_event_ids(10) == [("e-old", '{"ok": true}', "dig")]
    assert await seen.load_forks() == ([fork], 2)


async def test_the_store_keeps_working_after_a_failed_write(store: SessionStore) -> None:
    await store.write(WriteBatch({}, outbox_add=[OutboxRow(1, "", ())]))
    with pytest.raises(StoreError):
        await store.write(WriteBatch({"s": Session("s")}, outbox_add=[OutboxRow(1, "", ())]))
    await store.write(WriteBatch({"s": Session("s", ("a",))}))
    assert await store.load_all() == [Session("s", ("a",))]


async def test_writing_to_a_store_never_opened_raises(home: StoreHome) -> None:
    with pytest.raises(StoreError):
        await home.make().write({"s": Session("s")})


async def test_writing_after_close_raises_and_close_is_idempotent(home: StoreHome) -> None:
    store = await home.opened()
    await store.close()
    await store.close()
    with pytest.raises(StoreError):
        await store.write(WriteBatch({"s": Session("s")}))
    assert await (await home.opened()).load_all() == []
