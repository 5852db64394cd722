"""kill -9 of a daemon on PostgreSQL mid-burst: every acknowledged turn_end is committed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from support.burst import read_acks
from support.daemon_proc import DaemonProcess, trace_snapshot
from support.pg_nodes import check_acked_are_stored, run_burst_until, stored_sessions
from support.postgres import PostgresServer

from ramakv_daemon.core.manager import recompute_refcounts

KILL_AFTER_ACKS = 200


async def test_kill9_on_postgres_keeps_every_acknowledged_turn_end(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
    tmp_path: Path,
) -> None:
    url = postgres_server.create_database()
    d = daemon_proc_factory(config={"session_store_url": url, "node_id": "node-a"})
    stats = run_burst_until(d, tmp_path / "acks.txt", KILL_AFTER_ACKS, d.kill)
    assert stats["finished"] == 0, "the burst ended before the kill"
    acked = read_acks(tmp_path / "acks.txt")
    assert sum(acked.values()) == stats["acked"] >= KILL_AFTER_ACKS

    stored = await stored_sessions(url, "node-a")
    check_acked_are_stored(acked, stored)

    d.start()  # same database, same node
    assert d.event("health")["data"] == {
        "status": "running",
        "sessions_count": len(stored),
        "node_id": "node-a",
    }
    snapshot = await trace_snapshot(d.url)
    assert snapshot["refcounts"] == recompute_refcounts(stored.values())
    assert "postgresql://postgres@127.0.0.1" in d.log()  # it says where it stores
