"""ramakv-admin clean-ups on one PostgreSQL database shared by two real daemons."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable

import asyncpg
from support.daemon_proc import DaemonProcess, trace_snapshot
from support.postgres import PostgresServer
from test_handover import check_refcounts_match_owned, sessions_of, two_nodes, wait_for

from ramakv_daemon.cli.admin import main as admin_main


async def admin(*argv: str) -> tuple[int, str]:
    """ramakv-admin, as its own command would run it (its own event loop: a thread)."""

    def run() -> tuple[int, str]:
        out = io.StringIO()
        return admin_main(list(argv), out), out.getvalue()

    return await asyncio.to_thread(run)


async def stored(url: str) -> dict[str, str]:
    con = await asyncpg.connect(url)
    try:
        return {r[0]: r[1] for r in await con.fetch("SELECT session_id, owner FROM sessions")}
    finally:
        await con.close()


async def test_close_idle_hands_each_session_back_to_its_owner_to_close(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.create_database()
    a, b = two_nodes(daemon_proc_factory, url)
    for d, sid in ((a, "old-a"), (a, "keep-a"), (b, "old-b"), (b, "keep-b")):
        assert d.event(
            "turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": ["sys", sid]}
        )["ok"]
    for d, sid in ((a, "old-a"), (b, "old-b")):
        assert d.event("session_suspend", session_id=sid)["ok"]

    idle = ("--db", url, "close-idle", "--older-than", "0s", "--state", "suspended")
    code, text = await admin(*idle)
    assert code == 0 and "close old-a" in text and "close old-b" in text, text
    assert "dry run: nothing changed" in text and "keep-" not in text
    assert await stored(url) == {"old-a": "a", "keep-a": "a", "old-b": "b", "keep-b": "b"}

    code, text = await admin(*idle, "--yes")
    assert code == 0 and "closed 2 sessions" in text and "a 1, b 1" in text, text
    # Each owner released its session as a close would: its own chunk is gone there.
    wait_for(
        lambda: sessions_of(a) == {"keep-a"} and sessions_of(b) == {"keep-b"},
        "both owners to release their idle sessions",
    )
    assert await stored(url) == {"keep-a": "a", "keep-b": "b"}
    for d, keep in ((a, "keep-a"), (b, "keep-b")):
        assert (await trace_snapshot(d.url))["refcounts"] == {"sys": 1, keep: 1}
        await check_refcounts_match_owned(d)
    # A restart loads only what is left.
    a.kill()
    a.start()
    assert sessions_of(a) == {"keep-a"}


async def test_purge_namespace_closes_every_node_s_sessions_and_names_held_forks(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.create_database()
    a, b = two_nodes(daemon_proc_factory, url)
    for d, sid in ((a, "pa"), (b, "pb")):
        assert d.event(
            "turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": ["sys", sid]}
        )["ok"]
    fork_id = a.event("session_fork", session_id="pa")["data"]["fork_id"]

    code, text = await admin("--db", url, "purge-namespace", "", "--yes")
    # The fork's references live in node a's memory: only a session_fork_end there ends it.
    assert code == 1 and f"fork {fork_id} of pa is held by node a" in text, text
    assert "closed 2 sessions" in text, text

    def live(d: DaemonProcess) -> set[str]:  # a closed parent of an open fork is listed
        return {
            r["session_id"]
            for r in d.event("list_sessions")["data"]["sessions"]
            if r["state"] != "closed"
        }

    wait_for(lambda: live(a) == set() and live(b) == set(), "both owners to release their sessions")
    assert await stored(url) == {}
    assert (await trace_snapshot(b.url))["refcounts"] == {}
    assert (await trace_snapshot(a.url))["refcounts"] == {"sys": 1, "pa": 1}  # the fork
    ended = a.event("session_fork_end", session_id="pa", fork_id=fork_id)
    assert ended["ok"] and ended["data"]["fork_end"], ended
    assert (await trace_snapshot(a.url))["refcounts"] == {}


async def test_vacuum_runs_beside_the_daemons(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.create_database()
    a, _ = two_nodes(daemon_proc_factory, url)
    assert a.event("turn_end", session_id="s", kv_transfer_params={"chunk_hashes": ["h"]})["ok"]
    code, text = await admin("--db", url, "vacuum")
    assert code == 0 and "dry run: nothing changed" in text
    code, text = await admin("--db", url, "vacuum", "--yes")
    assert code == 0 and "done: vacuumed" in text, text
    assert a.event("turn_end", session_id="s", kv_transfer_params={"chunk_hashes": ["h", "i"]})[
        "ok"
    ]
