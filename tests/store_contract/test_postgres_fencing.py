"""PostgreSQL store only (two stores on one database at once, as two nodes): a takeover
bumps the row's version, and the old owner's write or delete of its copy is fenced in the
same statement; a row deleted and created again never takes an old version back."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from support.pg_nodes import sql
from support.postgres import PostgresServer

from ramakv_daemon.adapters.postgres.store import PostgresSessionStore
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.session import Session
from ramakv_daemon.ports import AnswerRow, EvictMode, OutboxRow, StoreFenced, WriteBatch


@pytest.fixture
async def nodes(postgres_server: PostgresServer) -> AsyncIterator[list[PostgresSessionStore]]:
    url = postgres_server.create_database()
    stores = [PostgresSessionStore(url, "node-a"), PostgresSessionStore(url, "node-b")]
    for store in stores:
        await store.open()
    yield stores
    for store in stores:
        await store.close()


async def row(store: PostgresSessionStore, sid: str) -> tuple[object, ...]:
    rows = await sql(
        store.url, "SELECT owner, turn_count, map_json FROM sessions WHERE session_id = $1", sid
    )
    return tuple(rows[0]) if rows else ()


async def test_a_claim_bumps_the_version_and_fences_the_old_owner_s_write(
    nodes: list[PostgresSessionStore],
) -> None:
    a, b = nodes
    await a.write(WriteBatch({"s": Session("s", ("x",), 3)}, forks={5: Fork(5, "s", ("x",), 1.0)}))
    before = a.version("s")
    claimed = await b.claim("s")
    assert claimed is not None and claimed.session.turn_count == 3
    assert [f.fork_id for f in claimed.forks] == [5]
    assert b.version("s") not in (None, before)
    await b.write(WriteBatch({"s": Session("s", ("x", "y"), 4)}))  # b's acknowledged turn
    # a has not heard: its stale copy's write (with its other rows) is refused whole.
    with pytest.raises(StoreFenced) as refused:
        await a.write(
            WriteBatch(
                {"s": Session("s", ("x", "old"), 4), "t": Session("t", ("t",), 1)},
                outbox_add=[OutboxRow(1, "", (("old", EvictMode.DELETE),))],
                event_ids=[AnswerRow("ev", "{}", 1.0, "d")],
            )
        )
    assert refused.value.sessions == ("s",)
    assert a.fenced_writes == 1 and a.connected  # not a store failure
    assert await row(a, "s") == ("node-b", 4, '["x","y"]')
    assert await row(a, "t") == ()
    assert await a.load_outbox() == [] and await a.load_event_ids(10) == []
    assert a.version("s") == before  # unchanged: still the stale one
    # Its delete (a session_close of the copy) too: the row stays b's.
    with pytest.raises(StoreFenced):
        await a.write(WriteBatch({"s": None}))
    assert await row(a, "s") == ("node-b", 4, '["x","y"]')
    # Released here (disowned), the close deletes nothing and is not refused.
    a.disown(["s"])
    await a.write(WriteBatch({"s": None}))
    assert await row(b, "s") == ("node-b", 4, '["x","y"]')


async def test_a_write_at_a_moved_version_never_resurrects_a_deleted_row(
    nodes: list[PostgresSessionStore],
) -> None:
    a, b = nodes
    await a.write(WriteBatch({"s": Session("s", ("x",), 1)}))
    stale = a.version("s")
    assert await b.claim("s") is not None
    await b.write(WriteBatch({"s": None}))  # b closed it (acknowledged)
    with pytest.raises(StoreFenced):
        await a.write(WriteBatch({"s": Session("s", ("x",), 2)}))
    assert await row(a, "s") == ()
    # Created again on b: a new version from the sequence, never a's old one.
    await b.write(WriteBatch({"s": Session("s", ("n",), 1)}))
    assert b.version("s") != stale
    with pytest.raises(StoreFenced):
        await a.write(WriteBatch({"s": Session("s", ("x",), 2)}))
    assert await row(a, "s") == ("node-b", 1, '["n"]')


async def test_two_nodes_creating_one_session_only_the_first_commit_wins(
    nodes: list[PostgresSessionStore],
) -> None:
    a, b = nodes
    await a.write(WriteBatch({"new": Session("new", ("a",), 1)}))
    with pytest.raises(StoreFenced):
        await b.write(WriteBatch({"new": Session("new", ("b",), 1)}))
    assert await row(a, "new") == ("node-a", 1, '["a"]')
    # b claims it (the event's way in): then its write is at the claimed version.
    assert await b.claim("new") is not None
    await b.write(WriteBatch({"new": Session("new", ("a", "b"), 2)}))
    assert await row(a, "new") == ("node-b", 2, '["a","b"]')


async def test_a_claim_of_a_session_this_node_owns_returns_its_row_owing_nothing(
    nodes: list[PostgresSessionStore],
) -> None:
    a, _ = nodes
    await a.write(WriteBatch({"s": Session("s", ("x",), 1)}, forks={3: Fork(3, "s", ("x",), 1.0)}))
    version = a.version("s")
    claimed = await a.claim("s")
    assert claimed is not None and claimed.previous_owner == "node-a"
    assert claimed.session == Session("s", ("x",), 1)
    assert [f.fork_id for f in claimed.forks] == [3]
    assert a.version("s") not in (None, version)
    assert await a.owed_releases() == []
    await a.write(WriteBatch({"s": Session("s", ("x",), 2)}))  # at the claimed version
