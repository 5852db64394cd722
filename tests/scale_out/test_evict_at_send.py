"""The daemon's own check at the send, on the handover path: an eviction a release queued
is never sent once a session this node owns references the chunk again (the dispatcher
checks each chunk as the evict body is written). Real daemons, real PostgreSQL, a stand-in
LMCache that refuses calls (503) until the chunk is referenced again."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from support.daemon_proc import DaemonProcess
from support.lmcache_server import FakeLMCacheServer
from support.pg_nodes import check_refcounts_match_owned, metric, until
from support.postgres import PostgresServer
from test_handover import sessions_of
from test_reconcile import node

SYS, X1, X2 = "5959", "a001", "a002"


@pytest.fixture
async def fake() -> AsyncIterator[FakeLMCacheServer]:
    async with FakeLMCacheServer() as f:
        yield f


async def test_an_eviction_queued_by_a_release_is_dropped_when_the_session_comes_back(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
    fake: FakeLMCacheServer,
) -> None:
    url = postgres_server.create_database()
    a = node(daemon_proc_factory, url, "a", fake=fake)
    b = node(daemon_proc_factory, url, "b")
    carried_out: list[str] = []
    fake.on_delete = carried_out.extend
    for sid, hashes in (("x", [SYS, X1]), ("other", [SYS])):
        assert a.event("turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": hashes})[
            "ok"
        ]
    await fake.set_failure("503")  # every memory call refused until healed: nothing done

    # b takes x: a releases it and queues X1's eviction, which the cache keeps refusing.
    assert b.event("turn_start", session_id="x")["data"]["prefetch_count"] == 2

    async def queued() -> bool:
        return "x" not in sessions_of(a) and metric(a, "ramakv_evict_outbox") == 1

    await until(queued, "node a to release x and queue its chunk's eviction")

    async def tried() -> bool:  # the dispatcher already tried to send it, at least once
        return any(X1 in body["chunk_hashes"] for body in fake.calls("evict"))

    await until(tried, "node a to try sending the eviction")
    # x comes back to a before any of those calls got through: a references X1 again.
    back = a.event("turn_end", session_id="x", kv_transfer_params={"chunk_hashes": [SYS, X1, X2]})
    assert back["ok"], back
    await fake.heal()

    async def dropped() -> bool:
        return metric(a, "ramakv_evict_outbox") == 0

    await until(dropped, "node a's dispatcher to drop the queued eviction at the send")
    assert X1 not in carried_out and SYS not in carried_out, carried_out
    assert sessions_of(a) == {"x", "other"}

    async def b_released() -> bool:
        return sessions_of(b) == set()

    await until(b_released, "node b to release x")
    await check_refcounts_match_owned(a)
    await check_refcounts_match_owned(b)
