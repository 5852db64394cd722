"""kill -9 mid-burst: every acknowledged turn_end is on disk, refcounts rebuild exactly."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from support import burst_client
from support.burst import read_acks, run_burst_until
from support.daemon_proc import DaemonProcess, trace_snapshot

from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.core.manager import recompute_refcounts

SESSIONS = 32
TURNS = 400  # far more than the burst gets through before the kill
KILL_AFTER_ACKS = 400


async def test_kill9_keeps_every_acknowledged_turn_end(
    daemon_proc_factory: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    d = daemon_proc_factory()
    acks_path = tmp_path / "acks.txt"
    stats = run_burst_until(d.url, acks_path, KILL_AFTER_ACKS, d.kill, SESSIONS, TURNS)
    assert stats["finished"] == 0, "the burst ended before the kill"
    assert stats["failed"] == SESSIONS, stats  # every session had a request cut off

    acked = read_acks(acks_path)
    assert sum(acked.values()) == stats["acked"] >= KILL_AFTER_ACKS

    # What is on disk, read by the daemon's own loader while nothing runs.
    store = SqliteSessionStore(str(d.store))
    await store.open()
    try:
        stored = {s.session_id: s for s in await store.load_all()}
    finally:
        await store.close()
    for sid, last_ack in acked.items():
        assert sid in stored, f"acknowledged session {sid} lost"
        s = stored[sid]
        # At most one unacknowledged turn per session was in flight at the kill.
        assert s.turn_count in (last_ack, last_ack + 1), (sid, last_ack, s.turn_count)
        assert list(s.chunk_hashes) == burst_client.expected_map(sid, s.turn_count)
        assert not s.suspended
    for sid, s in stored.items():
        if sid not in acked:  # only a first turn that was in flight may be there unacked
            assert s.turn_count == 1, (sid, s.turn_count)

    d.start()  # same SQLite file
    for sid, s in stored.items():
        assert d.event("session_map", session_id=sid)["data"] == {
            "session_id": sid,
            "chunk_hashes": list(s.chunk_hashes),
        }
    assert d.event("health")["data"] == {"status": "running", "sessions_count": len(stored)}
    snapshot = await trace_snapshot(d.url)
    expected = recompute_refcounts(stored.values())
    assert snapshot["refcounts"] == expected
    assert expected[burst_client.SHARED] == len(stored)
    assert "ram-a-kv restored" in d.log()

    # The restarted daemon carries on from the stored state.
    sid = next(iter(acked))
    nxt = stored[sid].turn_count + 1
    answer = d.event(
        "turn_end",
        session_id=sid,
        kv_transfer_params={"chunk_hashes": burst_client.expected_map(sid, nxt)},
    )
    assert answer["ok"] is True and answer["data"]["evicted_count"] == (1 if nxt > 6 else 0)
