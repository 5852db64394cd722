"""Two real daemons on one PostgreSQL database: a session moved back and forth."""

from __future__ import annotations

import time
from collections.abc import Callable

from support.daemon_proc import DaemonProcess, trace_snapshot
from support.postgres import PostgresServer

from ramakv_daemon.core.manager import recompute_refcounts
from ramakv_daemon.core.session import Session


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def sessions_of(d: DaemonProcess) -> set[str]:
    return {r["session_id"] for r in d.event("list_sessions")["data"]["sessions"]}


async def check_refcounts_match_owned(d: DaemonProcess) -> None:
    snap = await trace_snapshot(d.url)
    owned = [
        Session(s["session_id"], tuple(s["chunk_hashes"]), suspended=s["state"] == "suspended")
        for s in snap["sessions"].values()
    ]
    assert snap["refcounts"] == recompute_refcounts(owned)


def two_nodes(factory: Callable[..., DaemonProcess], url: str) -> tuple[DaemonProcess, ...]:
    return tuple(factory(config={"session_store_url": url, "node_id": node}) for node in ("a", "b"))


async def test_a_session_moves_to_the_node_its_event_reaches_and_back(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
) -> None:
    a, b = two_nodes(daemon_proc_factory, postgres_server.create_database())
    shared = ["sys", "tools"]
    assert a.event(
        "turn_end", session_id="s", kv_transfer_params={"chunk_hashes": [*shared, "a1", "a2"]}
    )["ok"]
    assert a.event(
        "turn_end", session_id="other", kv_transfer_params={"chunk_hashes": [*shared, "o1"]}
    )["ok"]

    # b gets a turn_start: it takes the session over and prefetches its map.
    started = b.event("turn_start", session_id="s")
    assert started["ok"] and started["data"]["prefetch_count"] == 4, started
    wait_for(lambda: "s" not in sessions_of(a), "node a to release s")
    assert sessions_of(a) == {"other"} and sessions_of(b) == {"s"}
    assert [r["owner"] for r in b.event("list_sessions")["data"]["sessions"]] == ["b"]
    # a released s as on a close: its own chunks went, the shared ones are still held.
    snap_a = await trace_snapshot(a.url)
    assert snap_a["refcounts"] == {"sys": 1, "tools": 1, "o1": 1}
    await check_refcounts_match_owned(a)
    await check_refcounts_match_owned(b)
    assert b.event("session_map", session_id="s")["data"]["chunk_hashes"] == [*shared, "a1", "a2"]

    # And back to a with a turn_end.
    assert b.event(
        "turn_end", session_id="s", kv_transfer_params={"chunk_hashes": [*shared, "a1", "a2", "b3"]}
    )["ok"]
    assert a.event(
        "turn_end",
        session_id="s",
        kv_transfer_params={"chunk_hashes": [*shared, "a1", "a2", "b3", "a4"]},
    )["ok"]
    wait_for(lambda: "s" not in sessions_of(b), "node b to release s")
    assert (await trace_snapshot(b.url))["refcounts"] == {}
    assert a.event("session_map", session_id="s")["data"]["chunk_hashes"] == [
        *shared,
        "a1",
        "a2",
        "b3",
        "a4",
    ]
    await check_refcounts_match_owned(a)

    # Each node restarts with only what it owns.
    a.kill()
    b.kill()
    a.start()
    b.start()
    assert sessions_of(a) == {"s", "other"} and sessions_of(b) == set()
    await check_refcounts_match_owned(a)


def test_ramakv_admin_reports_every_node_by_owner(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
) -> None:
    import io
    import json

    from ramakv_daemon.cli.admin import main as admin_main

    url = postgres_server.create_database()
    a, b = two_nodes(daemon_proc_factory, url)
    for d, sid in ((a, "s1"), (a, "s2"), (b, "s3")):
        assert d.event("turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": ["h", sid]})[
            "ok"
        ]
    out = io.StringIO()
    assert admin_main(["--db", url, "report", "--json"], out) == 0
    rep = json.loads(out.getvalue())
    assert rep["owners"] == {"a": 2, "b": 1}
    assert rep["store"].startswith("postgresql://postgres@127.0.0.1")


async def test_a_suspended_session_restored_on_another_node_is_prefetched_there(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
) -> None:
    a, b = two_nodes(daemon_proc_factory, postgres_server.create_database())
    assert a.event(
        "turn_end", session_id="s", kv_transfer_params={"chunk_hashes": ["x", "y", "z"]}
    )["ok"]
    assert a.event("session_suspend", session_id="s")["ok"]
    restored = b.event("snapshot_restore", session_id="s")
    assert restored["ok"] and restored["data"]["prefetch_count"] == 3, restored
    wait_for(lambda: "s" not in sessions_of(a), "node a to release s")
    assert (await trace_snapshot(b.url))["refcounts"] == {"x": 1, "y": 1, "z": 1}
    assert (await trace_snapshot(a.url))["refcounts"] == {}
    await check_refcounts_match_owned(b)
