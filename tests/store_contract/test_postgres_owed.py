"""PostgreSQL store only: a session taken from a node (a claim, an admin close; a write
never takes one over) leaves that node an owed release, written in the same transaction;
settling it puts its eviction intents in the node's outbox as it deletes the rows."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from support.postgres import PostgresServer

from ramakv_daemon.adapters.postgres.admin import PostgresStoreAdmin
from ramakv_daemon.adapters.postgres.store import PostgresSessionStore
from ramakv_daemon.admin_port import Cleanup
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.session import Session
from ramakv_daemon.ports import EvictMode, OutboxRow, OwedRelease, StoreFenced, WriteBatch


@pytest.fixture
async def nodes(postgres_server: PostgresServer) -> AsyncIterator[list[PostgresSessionStore]]:
    url = postgres_server.create_database()
    stores = [PostgresSessionStore(url, "node-a"), PostgresSessionStore(url, "node-b")]
    for store in stores:
        await store.open()
    yield stores
    for store in stores:
        await store.close()


def owed(rows: list[OwedRelease]) -> list[tuple[str, tuple[str, ...]]]:
    return [(o.session_id, o.hashes) for o in rows]


async def test_a_claim_leaves_the_old_owner_its_map_and_moved_forks_owed(
    nodes: list[PostgresSessionStore],
) -> None:
    a, b = nodes
    await a.write(
        WriteBatch({"s": Session("s", ("x", "y"), 2)}, forks={7: Fork(7, "s", ("x",), 1.0)})
    )
    claimed = await b.claim("s")
    assert claimed is not None and claimed.previous_owner == "node-a"
    assert owed(await a.owed_releases()) == [("s", ("x", "y")), ("s", ("x",))]
    assert await b.owed_releases() == []
    again = await b.claim("s")  # b owns it already: its row back, nothing more owed
    assert again is not None and again.previous_owner == "node-b"
    assert [f.fork_id for f in again.forks] == [7]
    assert len(await a.owed_releases()) == 2 and await b.owed_releases() == []


async def test_a_write_never_takes_a_session_over_so_nothing_is_owed(
    nodes: list[PostgresSessionStore],
) -> None:
    """Fencing: only a claim moves a session; b's blind write of a's row is refused."""
    a, b = nodes
    await a.write(WriteBatch({"t": Session("t", ("p", "q"), 1)}))
    await a.write(WriteBatch({"t": Session("t", ("p", "r"), 2)}))  # its own session: nothing owed
    assert await a.owed_releases() == []
    with pytest.raises(StoreFenced) as refused:
        await b.write(WriteBatch({"t": Session("t", ("z",), 3)}))
    assert refused.value.sessions == ("t",)
    assert await a.owed_releases() == [] and await b.owed_releases() == []
    assert await b.owners(["t"]) == {"t": "node-a"}


async def test_an_admin_close_leaves_the_owner_its_map_owed(
    nodes: list[PostgresSessionStore],
) -> None:
    a, _ = nodes
    session = Session("idle", ("i0", "i1"), 1, last_event_ts=5.0)
    await a.write(WriteBatch({"idle": session}))
    admin = PostgresStoreAdmin(a.url)
    await admin.open()
    try:
        done = await admin.close_sessions(Cleanup([session], {}))
    finally:
        await admin.close()
    assert done.closed == {"idle": "node-a"}
    assert owed(await a.owed_releases()) == [("idle", ("i0", "i1"))]


async def test_settling_writes_the_intents_and_deletes_the_rows_together(
    nodes: list[PostgresSessionStore],
) -> None:
    a, b = nodes
    await a.write(WriteBatch({"s": Session("s", ("x", "y"), 1), "u": Session("u", ("w",), 1)}))
    await b.claim("s")
    await b.claim("u")
    rows = await a.owed_releases()
    first = [o.row_id for o in rows if o.session_id == "s"]
    await a.settle_owed([OutboxRow(4, "", (("y", EvictMode.DELETE),))], first)
    assert owed(await a.owed_releases()) == [("u", ("w",))]
    assert await a.load_outbox() == [(4, "", (("y", "delete"),))]
    await a.drop_owed(["u"])
    assert await a.owed_releases() == []
