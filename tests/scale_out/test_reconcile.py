"""A node that missed the news releases anyway: after its LISTEN connection was cut (the
takeover and the close notified nobody there) and from its periodic check (a change no
notification told it of). Real daemons, a real PostgreSQL server, a stand-in LMCache."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from support.daemon_proc import DaemonProcess
from support.lmcache_server import FakeLMCacheServer
from support.pg_nodes import check_refcounts_match_owned, metric, metric_types, sql, until
from support.postgres import PostgresServer
from test_handover import sessions_of
from test_handover_load import EvictionProbe

# Hex, as LMCache's chunk hashes are: one chunk every session shares, each session's own.
SYS, KEEP, MOVED, CLOSED = "5959", ["4b00"], ["3a00", "3a01"], ["c100"]
STALE_A, STALE_B = [SYS, "5a00"], [SYS, "5a00", "5b01"]  # a's map of `stale`, then b's
NEVER = 3600.0  # an ownership_check_s that never comes round during a test


@pytest.fixture
async def fake() -> AsyncIterator[FakeLMCacheServer]:
    async with FakeLMCacheServer() as f:
        yield f


def node(
    factory: Callable[..., DaemonProcess],
    url: str,
    name: str,
    check_s: float = NEVER,
    fake: FakeLMCacheServer | None = None,
    pool_size: int = 4,
) -> DaemonProcess:
    config: dict[str, object] = {
        "session_store_url": url,
        "node_id": name,
        "ownership_check_s": check_s,
        "postgres_pool_size": pool_size,
    }
    if fake is not None:
        config["lmcache_url"] = fake.url
    return factory(noop=fake is None, config=config)


def three_sessions(a: DaemonProcess) -> None:
    for sid, own in (("keep", KEEP), ("moved", MOVED), ("closed", CLOSED)):
        got = a.event("turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": [SYS, *own]})
        assert got["ok"], got


async def check_released(
    a: DaemonProcess,
    fake: FakeLMCacheServer,
    probe: EvictionProbe,
    also: frozenset[str] = frozenset(),
    comes_back: frozenset[str] = frozenset(),
) -> None:
    """a holds only `keep`, its refcounts are what that recomputes to, and it evicted the
    released sessions' own chunks (never the shared one), each when nothing of it held it."""
    assert sessions_of(a) == {"keep"}
    await check_refcounts_match_owned(a)
    gone = {*MOVED, *CLOSED, *also}

    async def evicted_all() -> bool:
        return gone <= {h for body in fake.calls("evict") for h in body["chunk_hashes"]}

    await until(evicted_all, "node a to evict the released sessions' chunks")
    evicted = {h for body in fake.calls("evict") for h in body["chunk_hashes"]}
    assert evicted == gone, evicted  # SYS and KEEP are still held by `keep`
    # The probe's ask may come after the delete it checks: a chunk that came back to a
    # since (``comes_back``) can show a holder of later; any other must not.
    assert set(await probe.held_when_sent()) <= comes_back


async def test_a_cut_listener_releases_what_was_taken_and_closed_while_it_was_down(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
    fake: FakeLMCacheServer,
) -> None:
    url = postgres_server.create_database()
    database = url.rsplit("/", 1)[1]
    # No periodic check: the reconnect's. One pool connection each, opened at start-up, so
    # the nodes keep working while the database refuses new connections.
    a = node(daemon_proc_factory, url, "a", fake=fake, pool_size=1)
    b = node(daemon_proc_factory, url, "b", pool_size=1)
    probe = EvictionProbe(a)
    fake.on_delete = probe
    three_sessions(a)
    assert a.event("turn_end", session_id="stale", kv_transfer_params={"chunk_hashes": STALE_A})[
        "ok"
    ]
    admin = postgres_server.url()
    # Nobody may connect to the database (running connections stay), then a's listener is
    # cut: it cannot come back until the database takes connections again.
    await sql(admin, f"ALTER DATABASE {database} ALLOW_CONNECTIONS false")
    try:
        cut = await sql(
            admin,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'ram-a-kv a listen'",
        )
        assert [r[0] for r in cut] == [True]

        async def a_not_listening() -> bool:
            return metric(a, "ramakv_store_connected") == 0

        await until(a_not_listening, "node a to notice its LISTEN connection is gone")
        # b takes one session and closes another of a's, on its open pool connection; the
        # notifications go out to nobody on node a.
        started = b.event("turn_start", session_id="moved")
        assert started["ok"] and started["data"]["prefetch_count"] == 3, started
        assert b.event("session_close", session_id="closed")["data"]["closed"]
        assert sessions_of(a) == {"keep", "moved", "closed", "stale"}  # a heard nothing
        # b takes `stale` too, with a new map; an event for it then reaches a, whose copy is
        # stale: a asks the database first (its LISTEN is down) and takes b's row back.
        took = b.event("turn_end", session_id="stale", kv_transfer_params={"chunk_hashes": STALE_B})
        assert took["ok"], took
        back = a.event("turn_start", session_id="stale")
        assert back["ok"] and back["data"]["prefetch_count"] == len(STALE_B), back
        assert a.event("session_map", session_id="stale")["data"]["chunk_hashes"] == STALE_B
    finally:
        await sql(admin, f"ALTER DATABASE {database} ALLOW_CONNECTIONS true")

    async def a_released() -> bool:
        return sessions_of(a) == {"keep", "stale"}

    await until(a_released, "node a to release after its LISTEN connection came back")
    assert metric(a, "ramakv_store_reconnects_total") >= 1
    assert metric(a, "ramakv_session_releases_total") == 3  # stale (then back), moved, closed
    assert metric(a, "ramakv_session_takeovers_total") == 1  # stale, back from b
    assert metric(b, "ramakv_session_takeovers_total") == 3

    async def b_released() -> bool:
        return sessions_of(b) == {"moved"}

    await until(b_released, "node b to release stale")
    assert a.event("session_close", session_id="stale")["data"]["closed"]
    # a let its stale copy go (5a00 fell to 0 there) and took b's row back (5a00 again).
    own = frozenset(STALE_B[1:])
    await check_released(a, fake, probe, also=own, comes_back=frozenset(STALE_A[1:]))
    # a's closes deleted no row it no longer owned: `moved` is b's, `closed` is gone.
    rows = await sql(url, "SELECT session_id, owner FROM sessions ORDER BY session_id")
    assert [tuple(r) for r in rows] == [("keep", "a"), ("moved", "b")]
    await check_refcounts_match_owned(b)


async def test_the_periodic_check_releases_what_no_notification_announced(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
    fake: FakeLMCacheServer,
) -> None:
    url = postgres_server.create_database()
    a = node(daemon_proc_factory, url, "a", check_s=0.2, fake=fake)
    probe = EvictionProbe(a)
    fake.on_delete = probe
    three_sessions(a)
    # As a lost notification would leave it: the rows changed, node a was told nothing
    # and its LISTEN connection never dropped.
    await sql(url, "UPDATE sessions SET owner = 'b' WHERE session_id = 'moved'")
    await sql(url, "DELETE FROM sessions WHERE session_id = 'closed'")

    async def a_released() -> bool:
        return sessions_of(a) == {"keep"}

    await until(a_released, "node a's periodic check to release")
    assert metric(a, "ramakv_store_reconnects_total") == 0
    assert metric(a, "ramakv_session_releases_total") == 2
    types = metric_types(a)
    for name in ("ramakv_store_reconnects", "ramakv_session_takeovers", "ramakv_session_releases"):
        assert types[name] == "counter", (name, types.get(name))
    await check_released(a, fake, probe)
    # Node b starts with what it owns: the session a let go, its map as a left it.
    b = node(daemon_proc_factory, url, "b")
    assert sessions_of(b) == {"moved"}
    assert b.event("session_map", session_id="moved")["data"]["chunk_hashes"] == [SYS, *MOVED]
