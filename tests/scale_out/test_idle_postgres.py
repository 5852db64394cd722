"""The idle policies on a shared PostgreSQL store, two real daemons: each node's sweep acts
on the sessions it owns only (a session another node took is never taken back by an idle
suspend), its changes are committed to the shared rows like any event's (suspended flag,
row deleted, last_event_ts kept), and the clock is the stored one across restarts."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from support.daemon_proc import DaemonProcess
from support.pg_nodes import check_refcounts_match_owned, sql, until
from support.postgres import PostgresServer

POLICY = {"idle_suspend_s": 3600, "idle_close_s": 86400}


def turn_end(d: DaemonProcess, sid: str, hashes: list[str]) -> None:
    assert d.event("turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": hashes})["ok"]


async def rows(url: str) -> dict[str, tuple[bool, str, float]]:
    found = await sql(url, "SELECT session_id, suspended, owner, last_event_ts FROM sessions")
    return {r["session_id"]: (bool(r["suspended"]), r["owner"], r["last_event_ts"]) for r in found}


async def test_each_node_sweeps_what_it_owns_and_commits_it_to_the_shared_rows(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.create_database()
    a, b = (
        daemon_proc_factory(config={"session_store_url": url, "node_id": n, **POLICY})
        for n in ("a", "b")
    )
    turn_end(a, "on-a", ["sys", "a1"])
    turn_end(a, "moved", ["sys", "m1"])
    turn_end(b, "on-b", ["sys", "b1"])
    turn_end(b, "moved", ["sys", "m1", "m2"])  # b takes it over from a
    await until(
        lambda: _async(
            lambda: (
                "moved"
                not in {r["session_id"] for r in a.event("list_sessions")["data"]["sessions"]}
            )
        ),
        "node a to release the moved session",
    )
    a.stop()
    b.stop()
    now = time.time()
    # As if on-a and moved had been idle two hours, on-b more than a day.
    await sql(url, "UPDATE sessions SET last_event_ts = $1 WHERE session_id <> 'on-b'", now - 7200)
    await sql(url, "UPDATE sessions SET last_event_ts = $1 WHERE session_id = 'on-b'", now - 9e4)

    a.start()  # a first: it must not touch 'moved' (b's), though its clock ran out
    await until(lambda: _async(lambda: _state(a, "on-a") == "suspended"), "a's idle suspend")
    stored = await rows(url)
    assert stored["moved"][:2] == (False, "b") and stored["on-a"][:2] == (True, "a")
    assert abs(stored["on-a"][2] - (now - 7200)) < 1e-3  # the idle suspend kept its clock

    b.start()
    await until(lambda: _async(lambda: _state(b, "moved") == "suspended"), "b's idle suspend")
    await until(lambda: _async(lambda: _state(b, "on-b") is None), "b's idle close")
    stored = await rows(url)
    assert {sid: r[:2] for sid, r in stored.items()} == {
        "on-a": (True, "a"),
        "moved": (True, "b"),
    }
    await check_refcounts_match_owned(a)
    await check_refcounts_match_owned(b)

    a.stop()  # restart-safe: nothing more is due, nothing comes back
    a.start()
    assert _state(a, "on-a") == "suspended"
    assert {sid: r[:2] for sid, r in (await rows(url)).items()} == {
        "on-a": (True, "a"),
        "moved": (True, "b"),
    }


def _state(d: DaemonProcess, sid: str) -> str | None:
    for r in d.event("list_sessions")["data"]["sessions"]:
        if r["session_id"] == sid:
            return str(r["state"])
    return None


async def _async(check: Callable[[], bool]) -> bool:
    return check()


async def test_a_turn_starts_time_is_stored_in_the_shared_row(
    start_daemon: Callable[..., Any],
    make_config: Callable[..., Any],
    postgres_server: PostgresServer,
) -> None:
    """Issue 31 item 7 on PostgreSQL: a turn_start stores its time (the map stays as stored),
    so a restart's idle clock counts from it, not from the turn_end before it."""
    url = postgres_server.create_database()
    now = [1_000_000.0]
    config = make_config(session_store_url=url, node_id="a", idle_close_s=300.0)
    d = await start_daemon(config, clock=lambda: now[0])
    await d.turn_end("p", ["sys", "a1"])
    now[0] += 200
    await d.ok("turn_start", session_id="p")
    stored = await sql(url, "SELECT map_json, last_event_ts FROM sessions")
    assert [(r["map_json"], r["last_event_ts"]) for r in stored] == [('["sys","a1"]', 1_000_200.0)]
    await d.close()

    now[0] += 100  # 300 s after the turn_end, 100 s after the turn_start
    d = await start_daemon(config, clock=lambda: now[0])
    await d.daemon.idle_sweep.sweep()  # waits for the start-up sweep
    assert list(d.daemon.default.manager.sessions) == ["p"]
    now[0] = 1_000_499.0
    assert (await d.daemon.idle_sweep.sweep()).closed == 0
    now[0] = 1_000_500.0  # idle_close_s after the turn_start
    assert (await d.daemon.idle_sweep.sweep()).closed == 1
    await d.close()
