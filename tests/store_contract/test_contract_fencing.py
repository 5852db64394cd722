"""Store contract: the fenced write. Each session row is written only at the version the
store last loaded, claimed or wrote; a write that finds another row (or a row it never
read) raises StoreFenced naming it and stores nothing of its transaction."""

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
    StoreFenced,
    WriteBatch,
)


async def test_versions_follow_the_store_s_own_writes(home: StoreHome) -> None:
    store = await home.opened()
    assert store.version("s") is None  # no row as far as it knows: its write creates one
    await store.write(WriteBatch({"s": Session("s", ("a",), 1)}))
    first = store.version("s")
    assert first is not None
    await store.write(WriteBatch({"s": Session("s", ("b",), 2)}))  # at its own version: accepted
    assert store.version("s") not in (None, first)
    await store.write(WriteBatch({"s": None}))
    assert store.version("s") is None
    await store.write(WriteBatch({"s": Session("s", ("c",), 1)}))  # created again
    await store.close()
    again = await home.opened()
    assert again.version("s") is None  # nothing known before the load
    assert [s.chunk_hashes for s in await again.load_all()] == [("c",)]
    assert again.version("s") is not None
    await again.write(WriteBatch({"s": Session("s", ("d",), 2)}))  # the loaded version: accepted
    assert [s.chunk_hashes for s in await again.load_all()] == [("d",)]


async def test_a_blind_write_of_a_row_never_read_is_fenced_and_stores_nothing(
    home: StoreHome,
) -> None:
    first = await home.opened()
    await first.write(WriteBatch({"s": Session("s", ("a",), 3)}))
    await first.close()
    blind = await home.opened()  # never loaded: it does not know the row exists
    with pytest.raises(StoreFenced) as refused:
        await blind.write(
            WriteBatch(
                {"s": Session("s", ("z",), 1), "t": Session("t", ("t1",), 1)},
                outbox_add=[OutboxRow(1, "", (("gone", EvictMode.DELETE),))],
                event_ids=[AnswerRow("e1", '{"ok": true}', 1.0, "d")],
                forks={7: Fork(7, "t", ("t1",), 1.0)},
                next_fork_id=8,
            )
        )
    assert refused.value.sessions == ("s",)
    assert "'s'" in str(refused.value)
    assert blind.version("s") is None and blind.version("t") is None
    await blind.close()
    after = await home.opened()  # the whole transaction was rolled back
    assert await after.load_all() == [Session("s", ("a",), 3)]
    assert await after.load_outbox() == []
    assert await after.load_event_ids(10) == []
    assert (await after.load_forks()).forks == []
    # Having read it, the store writes it.
    await after.write(WriteBatch({"s": Session("s", ("b",), 4)}))
    assert await after.load_all() == [Session("s", ("b",), 4)]


async def test_a_disowned_row_is_never_touched_again(home: StoreHome) -> None:
    store = await home.opened()
    await store.write(WriteBatch({"s": Session("s", ("a",), 1), "k": Session("k", ("k",), 1)}))
    store.disown(["s"])
    assert store.version("s") is None
    await store.write(WriteBatch({"s": None}))  # the close of a released copy: deletes nothing
    with pytest.raises(StoreFenced):  # and a write must create it: the row is there
        await store.write(WriteBatch({"s": Session("s", ("b",), 2)}))
    await store.write(WriteBatch({"k": Session("k", ("k2",), 2)}))  # other rows go on as before
    await store.close()
    after = await home.opened()
    loaded = {s.session_id: s.chunk_hashes for s in await after.load_all()}
    assert loaded == {"s": ("a",), "k": ("k2",)}


async def test_a_session_created_and_closed_before_any_commit_writes_nothing(
    store: SessionStore,
) -> None:
    await store.write(WriteBatch({"never": None}))
    assert await store.load_all() == []
    assert store.version("never") is None
