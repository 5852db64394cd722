"""kill -9 of a daemon on PostgreSQL mid-burst: every acknowledged turn_end is committed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from support import burst, burst_client
from support.burst import read_acks
from support.daemon_proc import DaemonProcess, trace_snapshot
from support.postgres import PostgresServer

from ramakv_daemon.adapters.postgres.store import PostgresSessionStore
from ramakv_daemon.core.manager import recompute_refcounts

SESSIONS = 16
TURNS = 400  # far more than the burst gets through before the kill
KILL_AFTER_ACKS = 200


def run_burst_until(
    d: DaemonProcess, acks_path: Path, acks: int, then: Callable[[], None]
) -> dict[str, int]:
    """The burst client at this module's size against ``d``; ``then`` after ``acks``."""
    return burst.run_burst_until(d.url, acks_path, acks, then, SESSIONS, TURNS)


async def stored_sessions(url: str, node: str) -> dict:
    store = PostgresSessionStore(url, node)
    await store.open()
    try:
        return {s.session_id: s for s in await store.load_all()}
    finally:
        await store.close()


def check_acked_are_stored(acked: dict[str, int], stored: dict) -> None:
    for sid, last_ack in acked.items():
        assert sid in stored, f"acknowledged session {sid} lost"
        s = stored[sid]
        # At most one unacknowledged turn per session was in flight at the kill.
        assert s.turn_count in (last_ack, last_ack + 1), (sid, last_ack, s.turn_count)
        assert list(s.chunk_hashes) == burst_client.expected_map(sid, s.turn_count)


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
