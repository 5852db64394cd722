"""A session's open forks move with it: the new owner holds them (and ends them by id), the
old one releases their holds. Real daemons on a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Callable

from support.daemon_proc import DaemonProcess
from support.pg_nodes import check_refcounts_match_owned, metric, sql, until
from support.postgres import PostgresServer
from test_handover import two_nodes


def forks_of(d: DaemonProcess) -> dict[int, str]:
    """fork id -> parent, of every fork the node holds (closed parents included)."""
    rows = d.event("list_sessions", limit=1000)["data"]["sessions"]
    return {f["fork_id"]: r["session_id"] for r in rows for f in r.get("forks", ())}


async def test_open_forks_move_with_their_session_and_end_on_the_new_owner(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.create_database()
    a, b = two_nodes(daemon_proc_factory, url)
    assert a.event("turn_end", session_id="s", kv_transfer_params={"chunk_hashes": ["x", "y"]})[
        "ok"
    ]
    first = a.event("session_fork", session_id="s")["data"]["fork_id"]
    # The map moves on; the first fork still holds y, the second the new map.
    assert a.event("turn_end", session_id="s", kv_transfer_params={"chunk_hashes": ["x", "z"]})[
        "ok"
    ]
    second = a.event("session_fork", session_id="s")["data"]["fork_id"]
    # A fork of a session a closes stays on a: only an open session's forks move.
    assert a.event("turn_end", session_id="t", kv_transfer_params={"chunk_hashes": ["w"]})["ok"]
    kept = a.event("session_fork", session_id="t")["data"]["fork_id"]
    assert a.event("session_close", session_id="t")["data"]["closed"]
    assert forks_of(a) == {first: "s", second: "s", kept: "t"}

    # b's turn_start takes s over, with both of its forks.
    started = b.event("turn_start", session_id="s")
    assert started["ok"] and started["data"]["prefetch_count"] == 2, started

    async def a_released() -> bool:
        return forks_of(a) == {kept: "t"} and "s" not in {
            r["session_id"] for r in a.event("list_sessions")["data"]["sessions"]
        }

    await until(a_released, "node a to release s and its forks")
    assert forks_of(b) == {first: "s", second: "s"}
    rows = await sql(url, "SELECT fork_id, owner FROM forks ORDER BY fork_id")
    assert [tuple(r) for r in rows] == [(first, "b"), (second, "b"), (kept, "a")]
    _, forks_b = await check_refcounts_match_owned(b)
    assert {f.fork_id: set(f.hashes) for f in forks_b} == {first: {"x", "y"}, second: {"x", "z"}}
    _, forks_a = await check_refcounts_match_owned(a)  # only t's fork: {"w": 1}
    assert [f.fork_id for f in forks_a] == [kept]
    assert metric(a, "ramakv_open_forks") == 1 and metric(b, "ramakv_open_forks") == 2

    # The subagent's fork_end, routed to s's new node, ends the fork there.
    ended = b.event("session_fork_end", session_id="s", fork_id=first)
    assert ended["ok"] and ended["data"]["fork_end"], ended
    assert forks_of(b) == {second: "s"}
    await check_refcounts_match_owned(b)
    assert [tuple(r) for r in await sql(url, "SELECT fork_id, owner FROM forks ORDER BY 1")] == [
        (second, "b"),
        (kept, "a"),
    ]
    # Restarts load each node's own forks only.
    a.kill()
    b.kill()
    a.start()
    b.start()
    assert forks_of(a) == {kept: "t"} and forks_of(b) == {second: "s"}
    await check_refcounts_match_owned(a)
    await check_refcounts_match_owned(b)
