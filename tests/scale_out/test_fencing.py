"""Fencing: an event that reaches a session's old node before it heard of the takeover is
never applied on its stale copy, and never undoes what the new node acknowledged.

Two real daemons on one PostgreSQL database. Node a holds session s (three turns and a
fork); a is stopped (SIGSTOP) while b takes s over and acknowledges two turns and a fork
(and, for snapshot_restore, a suspend); a resumes without having heard the notification
(its LISTEN connection's server process is held, see support.pg_nodes.unheard), and one
event for s reaches a. Each changing event type is tried: a's write is fenced, a releases
its copy, claims the row as b committed it (with b's forks) and applies the event there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from support.daemon_proc import DaemonProcess
from support.pg_nodes import check_refcounts_match_owned, metric, sql, stopped, unheard, until
from support.postgres import PostgresServer

# a's three turns, then b's two; "sys" is shared with a's other session k.
A_MAPS = [["sys", "a1"], ["sys", "a1", "a2"], ["sys", "a1", "a2", "a3"]]
B_MAPS = [["sys", "a1", "b4"], ["sys", "b5"]]


def nodes(factory: Callable[..., DaemonProcess], url: str) -> tuple[DaemonProcess, DaemonProcess]:
    # No periodic ownership check within the test: only the fence may find the takeover.
    config = {"session_store_url": url, "ownership_check_s": 3600.0}
    a = factory(config={**config, "node_id": "a"})
    b = factory(config={**config, "node_id": "b"})
    return a, b


def ok(reply: dict[str, Any]) -> dict[str, Any]:
    assert reply["ok"], reply
    data: dict[str, Any] = reply["data"]
    return data


def turn_end(d: DaemonProcess, hashes: list[str]) -> dict[str, Any]:
    return ok(d.event("turn_end", session_id="s", kv_transfer_params={"chunk_hashes": hashes}))


def forks_of(d: DaemonProcess) -> dict[int, str]:
    rows = d.event("list_sessions", limit=1000)["data"]["sessions"]
    return {f["fork_id"]: r["session_id"] for r in rows for f in r.get("forks", ())}


def sessions_of(d: DaemonProcess) -> set[str]:
    return {r["session_id"] for r in d.event("list_sessions")["data"]["sessions"]}


async def stored(url: str) -> tuple[Any, ...] | None:
    rows = await sql(
        url, "SELECT owner, turn_count, map_json, suspended FROM sessions WHERE session_id = 's'"
    )
    return tuple(rows[0]) if rows else None


EVENTS = ["turn_end", "snapshot_restore", "session_suspend", "session_close", "session_fork"]
EVENTS += ["session_fork_end"]


@pytest.mark.parametrize("event", EVENTS)
async def test_an_event_reaching_the_old_node_applies_on_what_the_new_node_acknowledged(
    event: str,
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.create_database()
    a, b = nodes(daemon_proc_factory, url)
    for hashes in A_MAPS:
        turn_end(a, hashes)
    f0 = ok(a.event("session_fork", session_id="s"))["fork_id"]
    ok(a.event("turn_end", session_id="k", kv_transfer_params={"chunk_hashes": ["sys", "k1"]}))

    async with unheard(url, "a"):
        with stopped(a):  # around the takeover, as a paused node would be
            assert turn_end(b, B_MAPS[0])  # b claims s (and f0) from a: turn 4
            f1 = ok(b.event("session_fork", session_id="s"))["fork_id"]
            assert turn_end(b, B_MAPS[1])  # turn 5
            if event == "snapshot_restore":
                assert ok(b.event("session_suspend", session_id="s"))["suspended"]
        assert await stored(url) == (
            "b",
            5,
            '["sys","b5"]',
            event == "snapshot_restore",
        )
        # a runs again and has not heard: the event reaches its stale copy (turn 3).
        assert "s" in sessions_of(a)
        if event == "turn_end":
            assert turn_end(a, ["sys", "b5", "a6"])["map_updated"]
            expect = ("a", 6, '["sys","b5","a6"]', False)
        elif event == "snapshot_restore":
            data = ok(a.event("snapshot_restore", session_id="s"))
            assert data["prefetch_count"] == 2, data  # b's map, not a's four chunks
            expect = ("a", 5, '["sys","b5"]', False)
        elif event == "session_suspend":
            assert ok(a.event("session_suspend", session_id="s"))["suspended"]
            expect = ("a", 5, '["sys","b5"]', True)
        elif event == "session_close":
            assert ok(a.event("session_close", session_id="s"))["closed"]
            expect = None
        elif event == "session_fork":
            g = ok(a.event("session_fork", session_id="s"))["fork_id"]
            expect = ("a", 5, '["sys","b5"]', False)
        else:
            data = ok(a.event("session_fork_end", session_id="s", fork_id=f0))
            assert data["fork_end"], data
            expect = ("a", 5, '["sys","b5"]', False)
        # What b acknowledged was the base the event applied on: nothing was undone.
        assert await stored(url) == expect

    # b hears the takeover back (a's claim) and releases s with its forks.
    async def b_released() -> bool:
        return not sessions_of(b) and not forks_of(b)

    await until(b_released, "node b to release s and its forks")
    assert metric(b, "ramakv_open_forks") == 0
    await check_refcounts_match_owned(b)
    sessions_a, _ = await check_refcounts_match_owned(a)
    assert {s.session_id for s in sessions_a} == ({"k"} if event == "session_close" else {"s", "k"})
    # b's forks moved to a with the session (never stranded on b); each ends on a.
    expected_forks = {f0: "s", f1: "s"}
    if event == "session_fork":
        expected_forks[g] = "s"
    if event == "session_fork_end":
        del expected_forks[f0]
    assert forks_of(a) == expected_forks
    rows = await sql(url, "SELECT fork_id, owner FROM forks ORDER BY fork_id")
    assert {r["fork_id"]: r["owner"] for r in rows} == {fid: "a" for fid in expected_forks}
    for fid in expected_forks:
        assert ok(a.event("session_fork_end", session_id="s", fork_id=fid))["fork_end"]
    assert forks_of(a) == {} and await sql(url, "SELECT fork_id FROM forks") == []
    await check_refcounts_match_owned(a)
    # A restart of each loads exactly what it owns.
    a.kill()
    b.kill()
    a.start()
    b.start()
    assert sessions_of(b) == set()
    assert sessions_of(a) == ({"k"} if event == "session_close" else {"s", "k"})
    await check_refcounts_match_owned(a)


async def test_an_idle_sweep_on_a_stale_copy_never_takes_the_session_back(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
) -> None:
    """Node a's idle policy finds its copy of s idle after b took s over unheard: its
    suspend is fenced, a releases the copy, and s stays b's, active (the sweep acts on
    this node's own sessions only: it never claims one)."""
    url = postgres_server.create_database()
    config = {"session_store_url": url, "ownership_check_s": 3600.0, "idle_close_s": 0.0}
    a = daemon_proc_factory(config={**config, "node_id": "a", "idle_suspend_s": 1.0})
    b = daemon_proc_factory(config={**config, "node_id": "b", "idle_suspend_s": 0.0})
    turn_end(a, A_MAPS[0])
    async with unheard(url, "a"):
        with stopped(a):
            turn_end(b, B_MAPS[0])  # b claims s: a's copy is stale, its clock old

        async def a_released() -> bool:
            return "s" not in sessions_of(a)

        await until(a_released, "node a's idle sweep to find its copy stale")
        assert await stored(url) == ("b", 2, '["sys","a1","b4"]', False)
    assert sessions_of(b) == {"s"}
    assert "fenced write" in a.log()
    await check_refcounts_match_owned(a)
    await check_refcounts_match_owned(b)
