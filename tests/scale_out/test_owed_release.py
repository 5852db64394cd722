"""A node that was down while its sessions were taken over or closed releases them when it
restarts: the owed rows the claim (and the admin close) wrote are settled into evictions of
what none of its own sessions references, through its outbox. A live node releases from
memory and only drops the rows. Real daemons, a real PostgreSQL server, a stand-in LMCache."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable

import pytest
from support.daemon_proc import DaemonProcess
from support.lmcache_server import FakeLMCacheServer
from support.pg_nodes import check_refcounts_match_owned, sql, until
from support.postgres import PostgresServer
from test_handover import sessions_of
from test_handover_load import EvictionProbe
from test_reconcile import node

from ramakv_daemon.adapters.postgres.sql import ADMIN_DELETE_SESSION

# Hex, as LMCache's chunk hashes are. SYS: every session's; KEEP: `keep`'s own and in
# `moved` too; PARK: a suspended session's and in `moved` too; the rest one session's own.
SYS, KEEP, PARK = "5959", "4b00", "9a00"
MOVED, FORKED, IDLE = ["3a00", "3a01"], "f000", "1d00"


@pytest.fixture
async def fake() -> AsyncIterator[FakeLMCacheServer]:
    async with FakeLMCacheServer() as f:
        yield f


def deleted(fake: FakeLMCacheServer) -> Counter[str]:
    """Chunk -> how many deletes the stand-in got for it (a demote names its tiers)."""
    return Counter(
        h for body in fake.calls("evict") if "locations" not in body for h in body["chunk_hashes"]
    )


def turn_end(d: DaemonProcess, session_id: str, hashes: list[str]) -> None:
    got = d.event("turn_end", session_id=session_id, kv_transfer_params={"chunk_hashes": hashes})
    assert got["ok"], got


async def owed_rows(url: str) -> list[tuple[str, str]]:
    rows = await sql(url, "SELECT node_id, session_id FROM owed_releases ORDER BY id")
    return [(r[0], r[1]) for r in rows]


async def test_a_restarted_node_evicts_what_was_taken_and_closed_while_it_was_down(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
    fake: FakeLMCacheServer,
) -> None:
    url = postgres_server.create_database()
    a = node(daemon_proc_factory, url, "a", fake=fake)
    b = node(daemon_proc_factory, url, "b")
    turn_end(a, "keep", [SYS, KEEP])
    turn_end(a, "parked", [SYS, PARK])
    assert a.event("session_suspend", session_id="parked")["ok"]
    # A fork of `moved`'s first map holds FORKED after the map moves on; the fork moves
    # with the session, and its hold is owed too.
    turn_end(a, "moved", [SYS, *MOVED, FORKED])
    fork = a.event("session_fork", session_id="moved")
    assert fork["ok"], fork
    turn_end(a, "moved", [SYS, *MOVED, KEEP, PARK])
    turn_end(a, "idle", [SYS, IDLE])
    before = deleted(fake)
    a.kill()

    # While a is down: b takes `moved` (and its fork); an operator closes `idle`.
    started = b.event("turn_start", session_id="moved")
    assert started["ok"], started
    ts = (await sql(url, "SELECT last_event_ts FROM sessions WHERE session_id = 'idle'"))[0][0]
    assert [r[0] for r in await sql(url, ADMIN_DELETE_SESSION, "idle", ts)] == ["a"]
    assert {s for n, s in await owed_rows(url) if n == "a"} == {"moved", "idle"}
    assert await owed_rows(url) == [r for r in await owed_rows(url) if r[0] == "a"]

    probe = EvictionProbe(a)
    fake.on_delete = probe
    a.start()
    assert sessions_of(a) == {"keep", "parked"}
    gone = {*MOVED, FORKED, IDLE}

    async def settled() -> bool:
        return gone <= set(deleted(fake) - before) and not await owed_rows(url)

    await until(settled, "node a to evict what it owed and drop the rows")
    # SYS and KEEP are referenced by `keep`, PARK is parked by the suspended `parked`.
    assert set(deleted(fake) - before) == gone
    assert await probe.held_when_sent() == {}

    async def outbox_empty() -> bool:
        return not await sql(url, "SELECT id FROM evict_log WHERE owner = 'a'")

    await until(outbox_empty, "node a's outbox rows to be retired once delivered")
    await check_refcounts_match_owned(a)
    # Settled once: a second restart owes nothing and deletes nothing more.
    a.kill()
    a.start()
    assert sessions_of(a) == {"keep", "parked"}
    assert not await owed_rows(url)
    assert set(deleted(fake) - before) == gone
    await check_refcounts_match_owned(a)


async def test_a_live_node_releases_from_memory_and_only_drops_its_rows(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
    fake: FakeLMCacheServer,
) -> None:
    url = postgres_server.create_database()
    a = node(daemon_proc_factory, url, "a", fake=fake)
    b = node(daemon_proc_factory, url, "b")
    turn_end(a, "keep", [SYS, KEEP])
    turn_end(a, "moved", [SYS, *MOVED, KEEP])
    assert b.event("turn_start", session_id="moved")["ok"]

    async def released() -> bool:
        return sessions_of(a) == {"keep"} and not await owed_rows(url)

    await until(released, "node a to release `moved` and drop its owed row")

    async def evicted() -> bool:
        return set(MOVED) <= set(deleted(fake))

    await until(evicted, "node a's release to evict the session's own chunks")
    await check_refcounts_match_owned(a)

    async def outbox_empty() -> bool:
        return not await sql(url, "SELECT id FROM evict_log WHERE owner = 'a'")

    await until(outbox_empty, "node a's outbox rows to be retired once delivered")
    # The restart finds nothing owed: each chunk was deleted once, by the release.
    a.kill()
    a.start()
    await check_refcounts_match_owned(a)
    assert deleted(fake) == Counter(MOVED)
