"""Store contract, the operator's part: what ramakv-admin reads and changes, on every store."""

from __future__ import annotations

import pytest
from support.store_adapters import StoreHome

from ramakv_daemon.adapters.sqlite.admin import SqliteStoreAdmin
from ramakv_daemon.admin_port import Cleanup, PendingEviction, StoreAdmin
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.session import Session
from ramakv_daemon.ports import (
    EvictMode,
    OutboxEntry,
    OutboxRow,
    StoreError,
    StoreInUse,
    StoreNotFound,
    WriteBatch,
)

NS = "kvp-b"
S1 = Session("s1", ("a", "b"), 2, False, 100.0)
S2 = Session("s2", ("b", "c"), 1, True, 200.0, NS)
S3 = Session("s3", ("d",), 1, False, 300.0)
FORK = Fork(1, "s1", ("a", "b"), 150.0)


def admin_of(home: StoreHome) -> StoreAdmin:
    """The admin port on the store a home's stores write to."""
    if home.adapter == "sqlite":
        return SqliteStoreAdmin(home.location)
    from ramakv_daemon.adapters.postgres.admin import PostgresStoreAdmin

    return PostgresStoreAdmin(home.location)


async def opened_admin(home: StoreHome) -> StoreAdmin:
    admin = admin_of(home)
    await admin.open()
    return admin


async def seeded(home: StoreHome) -> None:
    """Three sessions in two namespaces, an open fork and two outbox rows, then closed
    (as a stopped daemon leaves its store)."""
    store = await home.opened()
    await store.write(
        WriteBatch(
            {s.session_id: s for s in (S1, S2, S3)},
            outbox_add=[
                OutboxRow(1, "", (OutboxEntry("x", EvictMode.DELETE),)),
                OutboxRow(2, NS, (OutboxEntry("y", EvictMode.DEMOTE),)),
            ],
            forks={1: FORK},
            next_fork_id=2,
        )
    )
    await store.close()


def by_id(sessions: list[Session]) -> list[Session]:
    return sorted(sessions, key=lambda s: s.session_id)


async def test_read_sees_every_row_as_written(home: StoreHome) -> None:
    await seeded(home)
    admin = await opened_admin(home)
    try:
        view = await admin.read()
    finally:
        await admin.close()
    assert by_id(view.sessions) == [S1, S2, S3]
    assert view.forks == [FORK]
    assert sorted(view.outbox) == [
        PendingEviction("", "x", EvictMode.DELETE),
        PendingEviction(NS, "y", EvictMode.DEMOTE),
    ]
    assert all(type(e.mode) is EvictMode for e in view.outbox)
    if admin.shared:  # each row has an owner node, and a fork lives in its node's memory
        assert view.owners == {"node-a": 3} and view.fork_holders == {1: "node-a"}
    else:
        assert view.owners is None and view.fork_holders == {}


async def test_an_empty_store_reads_empty(home: StoreHome) -> None:
    await (await home.opened()).close()
    admin = await opened_admin(home)
    view = await admin.read()
    await admin.close()
    assert (view.sessions, view.forks, view.outbox) == ([], [], [])


async def test_reads_work_beside_a_running_daemon(home: StoreHome) -> None:
    store = await home.opened()  # the daemon's store stays open
    await store.write(WriteBatch({"s1": S1}))
    admin = await opened_admin(home)
    try:
        assert (await admin.read()).sessions == [S1]
    finally:
        await admin.close()


async def test_close_sessions_closes_exactly_the_planned_ones(home: StoreHome) -> None:
    await seeded(home)
    admin = await opened_admin(home)
    plan = Cleanup([S3], {"": {"d": EvictMode.DELETE}})
    try:
        done = await admin.close_sessions(plan)
        view = await admin.read()
    finally:
        await admin.close()
    # A shared store's owner is told (it evicts); a daemon's own file queues the eviction.
    assert done.closed == {"s3": "node-a" if admin.shared else None} and done.left == []
    assert by_id(view.sessions) == [S1, S2] and view.forks == [FORK]
    restarted = await home.opened()
    assert by_id(await restarted.load_all()) == [S1, S2]
    waiting = {
        (r.namespace, e.chunk_hash, e.mode)
        for r in await restarted.load_outbox()
        for e in r.entries
    }
    assert ("", "x", EvictMode.DELETE) in waiting
    assert (("", "d", EvictMode.DELETE) in waiting) is not admin.shared


async def test_a_purge_ends_planned_forks_where_the_store_holds_them(home: StoreHome) -> None:
    await seeded(home)
    admin = await opened_admin(home)
    plan = Cleanup([S1, S3], {"": {"a": EvictMode.DELETE, "d": EvictMode.DELETE}}, [FORK])
    try:
        done = await admin.close_sessions(plan)
    finally:
        await admin.close()
    assert set(done.closed) == {"s1", "s3"}
    forks = (await (await home.opened()).load_forks()).forks
    if admin.shared:  # only its node can end it: named, left as it is
        assert done.forks_kept == {1: "node-a"} and forks == [FORK]
    else:
        assert done.forks_kept == {} and forks == []


async def test_changes_wait_for_a_daemon_s_own_store_and_go_beside_shared_ones(
    home: StoreHome,
) -> None:
    store = await home.opened()  # a running daemon
    await store.write(WriteBatch({"s1": S1, "s3": S3}))
    admin = await opened_admin(home)
    try:
        if admin.shared:
            assert admin.holder() is None
            done = await admin.close_sessions(Cleanup([S3], {}))
            assert done.closed == {"s3": "node-a"}
            await admin.vacuum()
            return
        holder = admin.holder()
        assert holder is not None and holder.startswith("pid ")
        with pytest.raises(StoreInUse) as refused:
            await admin.close_sessions(Cleanup([S3], {"": {"d": EvictMode.DELETE}}))
        assert refused.value.holder == holder
        with pytest.raises(StoreInUse):
            await admin.vacuum()
        assert by_id((await admin.read()).sessions) == [S1, S3]  # nothing changed
    finally:
        await admin.close()
    await store.close()
    assert admin.holder() is None  # the daemon stopped: the lock is free


async def test_a_shared_store_leaves_a_session_an_event_reached_since_the_plan(
    home: StoreHome,
) -> None:
    store = await home.opened()
    await store.write(WriteBatch({"s1": S1}))
    admin = await opened_admin(home)
    if not admin.shared:
        await admin.close()
        pytest.skip("a daemon's own store is changed only under its lock: nothing moves")
    try:
        newer = S1.evolve(last_event_ts=S1.last_event_ts + 1, turn_count=3)
        await store.write(WriteBatch({"s1": newer}))  # the owner moves on after the plan read S1
        done = await admin.close_sessions(Cleanup([S1], {}))
        assert done.closed == {} and done.left == ["s1"]
        assert (await admin.read()).sessions == [newer]
    finally:
        await admin.close()


async def test_vacuum_keeps_every_row(home: StoreHome) -> None:
    await seeded(home)
    admin = await opened_admin(home)
    try:
        assert admin.vacuum_plan().startswith("VACUUM")
        before = await admin.read()
        await admin.vacuum()
        assert await admin.read() == before
    finally:
        await admin.close()


async def test_opening_a_missing_store_fails_and_creates_nothing(home: StoreHome) -> None:
    if home.adapter == "sqlite":
        missing: StoreAdmin = SqliteStoreAdmin(home.location + ".missing")
        with pytest.raises(StoreNotFound):
            await missing.open()
        return
    from ramakv_daemon.adapters.postgres.admin import PostgresStoreAdmin

    missing = PostgresStoreAdmin(home.location.rsplit("/", 1)[0] + "/no_such_database")
    with pytest.raises(StoreError):
        await missing.open()
    await missing.close()
