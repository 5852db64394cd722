"""Store contract: fork ids handed out by a store that several daemons share."""

from __future__ import annotations

import asyncio

import pytest
from support.store_adapters import StoreHome

from ramakv_daemon.core.fork import Fork
from ramakv_daemon.ports import SharedSessionStore, WriteBatch


async def _sharing(home: StoreHome) -> tuple[SharedSessionStore, SharedSessionStore]:
    """Two stores on one home, as two daemons on one database; skips where a store cannot
    be shared (an embedded SQLite file is one daemon's: the store lock says so)."""
    first = await home.opened()
    if not isinstance(first, SharedSessionStore):
        pytest.skip(f"{home.adapter} is one daemon's store: its own counter is the only one")
    second = await home.opened()
    assert isinstance(second, SharedSessionStore)
    return first, second


async def test_daemons_taking_fork_ids_at_once_never_get_the_same(home: StoreHome) -> None:
    a, b = await _sharing(home)
    taken = await asyncio.gather(*(s.take_fork_id() for _ in range(40) for s in (a, b)))
    assert len(set(taken)) == len(taken) == 80
    assert min(taken) >= 1


async def test_a_taken_id_is_above_every_open_fork_and_the_stored_counter(
    home: StoreHome,
) -> None:
    a, b = await _sharing(home)
    await a.write(WriteBatch({}, forks={7: Fork(7, "p", ("a",), 1.0)}))
    assert await b.take_fork_id() == 8
    await a.write(WriteBatch({}, next_fork_id=20))
    assert await b.take_fork_id() == 20
    assert await a.take_fork_id() == 21


async def test_a_restart_loads_a_counter_above_every_taken_id(home: StoreHome) -> None:
    """Even when the fork of the newest id never committed (its id is skipped)."""
    a, _ = await _sharing(home)
    taken = [await a.take_fork_id() for _ in range(3)]
    await a.close()
    _, next_id = await (await home.opened()).load_forks()
    assert next_id == max(taken) + 1
