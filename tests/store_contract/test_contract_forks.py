"""Store contract: open forks and the store-wide fork id counter."""

from __future__ import annotations

from support.store_adapters import StoreHome

from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.session import Session
from ramakv_daemon.ports import SessionStore, WriteBatch


async def test_forks_round_trip_oldest_first(home: StoreHome) -> None:
    store = await home.opened()
    f3 = Fork(3, "p", ("a", "b"), 30.5, "ns")
    f1 = Fork(1, "p", ("a",), 10.25)
    f2 = Fork(2, "q", (), 20.0)
    await store.write(WriteBatch({}, forks={3: f3, 1: f1, 2: f2}, next_fork_id=4))
    assert await store.load_forks() == ([f1, f2, f3], 4)
    await store.close()
    assert await (await home.opened()).load_forks() == ([f1, f2, f3], 4)


async def test_an_ended_fork_is_gone_and_its_id_never_comes_back(home: StoreHome) -> None:
    store = await home.opened()
    await store.write(WriteBatch({}, forks={1: Fork(1, "p", ("a",), 1.0)}, next_fork_id=2))
    await store.write(WriteBatch({}, forks={1: None}))
    await store.close()
    forks, next_id = await (await home.opened()).load_forks()
    assert forks == [] and next_id == 2  # the newest fork ended: the counter still says 2


async def test_the_counter_only_grows(store: SessionStore) -> None:
    await store.write(WriteBatch({}, next_fork_id=10))
    await store.write(WriteBatch({}, next_fork_id=5))
    assert await store.load_forks() == ([], 10)


async def test_the_next_id_is_above_every_open_fork(store: SessionStore) -> None:
    """Even when the counter was never written past it."""
    await store.write(WriteBatch({}, forks={7: Fork(7, "p", ("a",), 1.0)}))
    forks, next_id = await store.load_forks()
    assert [f.fork_id for f in forks] == [7] and next_id == 8


async def test_a_fork_outlives_its_parents_delete(store: SessionStore) -> None:
    fork = Fork(1, "p", ("a",), 1.0)
    await store.write(WriteBatch({"p": Session("p", ("a",))}, forks={1: fork}, next_fork_id=2))
    await store.write(WriteBatch({"p": None}))
    assert await store.load_all() == []
    assert await store.load_forks() == ([fork], 2)


async def test_a_fork_written_again_replaces_the_old_row(store: SessionStore) -> None:
    await store.write(WriteBatch({}, forks={1: Fork(1, "p", ("a",), 1.0)}))
    newer = Fork(1, "p", ("a", "b"), 2.0)
    await store.write(WriteBatch({}, forks={1: newer}))
    assert (await store.load_forks())[0] == [newer]
