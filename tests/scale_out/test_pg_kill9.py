"""kill -9 of a daemon on PostgreSQL mid-burst: every acknowledged turn_end is committed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from support import burst_client
from support.daemon_proc import DaemonProcess, trace_snapshot
from support.postgres import PostgresServer

from ramakv_daemon.adapters.postgres_store import PostgresSessionStore
from ramakv_daemon.core.manager import recompute_refcounts

SESSIONS = 16
TURNS = 400  # far more than the burst gets through before the kill
KILL_AFTER_ACKS = 200


def count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def run_burst_until(
    d: DaemonProcess, acks_path: Path, acks: int, then: Callable[[], None]
) -> dict[str, int]:
    """Start the burst client, call ``then`` once ``acks`` answers came, return its stats."""
    client = subprocess.Popen(
        [
            sys.executable,
            burst_client.__file__,
            d.url,
            str(acks_path),
            "--sessions",
            str(SESSIONS),
            "--turns",
            str(TURNS),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while count_lines(acks_path) < acks:
            assert client.poll() is None, client.communicate()
            assert time.monotonic() < deadline, "burst too slow to reach the kill point"
            time.sleep(0.01)
        then()
        out, _ = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    return json.loads(out.strip().splitlines()[-1])


def read_acks(path: Path) -> dict[str, int]:
    acked: dict[str, int] = {}
    for line in path.read_text().splitlines():
        sid, turn = line.split()
        assert int(turn) == acked.get(sid, 0) + 1  # each session's acks are in order
        acked[sid] = int(turn)
    return acked


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
