"""Persistence: stop the app, start a new one on the same SQLite file, find the same state."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from support.daemon_app import DaemonClient, RecordingBackend

from ramakv_daemon.core.manager import recompute_refcounts


def full_state(d: DaemonClient) -> dict[str, Any]:
    m = d.daemon.default.manager
    return {
        "sessions": {
            sid: (s.chunk_hashes, s.turn_count, s.suspended) for sid, s in m.sessions.items()
        },
        "forks": {f.fork_id: (f.session_id, f.hashes, f.created_ts) for f in m.forks.values()},
        "refcounts": m.refcounts.as_dict(),
        "parked": dict(m.parked),
    }


async def test_restart_restores_everything(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    config = make_config()
    d = await start_daemon(config)
    await d.turn_end("active", ["sys", "a1", "a2"])
    await d.turn_end("active", ["sys", "a2", "a3"])  # turn 2
    await d.turn_end("forked", ["sys", "f1", "f2"])
    await d.ok("session_fork", session_id="forked")
    await d.turn_end("forked", ["sys", "f3"])  # fork still holds f1, f2
    await d.ok("session_fork", session_id="forked")  # nested: holds sys, f3
    await d.turn_end("sleepy", ["sys", "s1", "s2"])
    await d.ok("session_suspend", session_id="sleepy")
    await d.turn_end("gone", ["g1"])
    await d.ok("session_close", session_id="gone")
    before = full_state(d)
    assert before["refcounts"] == {
        "sys": 4,
        "a2": 1,
        "a3": 1,
        "f1": 1,
        "f2": 1,
        "f3": 2,
    }
    assert before["parked"] == {"sys": 1, "s1": 1, "s2": 1}
    await d.close()

    d2 = await start_daemon(config)
    assert full_state(d2) == before
    assert (await d2.ok("health"))["sessions_count"] == 3
    assert await d2.ok("session_map", session_id="sleepy") == {
        "session_id": "sleepy",
        "chunk_hashes": ["sys", "s1", "s2"],
    }
    assert d2.daemon.default.manager.sessions["active"].turn_count == 2
    assert d2.daemon.default.manager.sessions["forked"].turn_count == 2
    # The restored fork holds still work, newest first.
    await d2.ok("session_fork_end", session_id="forked")
    assert d2.refcounts()["f3"] == 1
    await d2.ok("session_fork_end", session_id="forked")
    assert "f1" not in d2.refcounts() and "f2" not in d2.refcounts()
    # The restored suspended session can be restored and then closed.
    assert await d2.ok("snapshot_restore", session_id="sleepy") == {
        "prefetch_sent": True,
        "prefetch_count": 3,
    }
    d2.assert_consistent()
    after = full_state(d2)
    await d2.close()

    d3 = await start_daemon(config)
    assert full_state(d3) == after
    assert d3.daemon.default.manager.sessions["sleepy"].suspended is False


async def test_suspended_survives_restart_and_close_deletes(
    start_daemon,
    make_config,  # type: ignore[no-untyped-def]
) -> None:
    config = make_config()
    d = await start_daemon(config)
    await d.turn_end("s", ["x", "y"])
    await d.ok("session_suspend", session_id="s")
    await d.close()

    backend = RecordingBackend()
    d2 = await start_daemon(config, backend=backend)
    assert d2.daemon.default.manager.sessions["s"].suspended is True
    assert d2.refcounts() == {}
    assert await d2.ok("turn_start", session_id="s") == {
        "prefetch_sent": False,
        "prefetch_count": 0,
    }
    assert await d2.ok("session_close", session_id="s") == {"evicted_count": 2, "closed": True}
    await d2.settle()
    assert sorted(backend.of("delete")) == ["x", "y"]
    await d2.close()

    d3 = await start_daemon(config)
    assert d3.daemon.default.manager.sessions == {}


async def test_original_schema_database_loads(
    start_daemon,
    make_config,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """A file written by the original project: only the `sessions` table, no state table."""
    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.execute(
        "CREATE TABLE sessions (session_id TEXT PRIMARY KEY, map_json TEXT NOT NULL, "
        "turn_count INTEGER NOT NULL DEFAULT 0)"
    )
    con.executemany(
        "INSERT INTO sessions VALUES (?, ?, ?)",
        [
            ("old-1", json.dumps(["sys", "h1", "h1", "h2"]), 7),
            ("old-2", json.dumps(["sys", "h3"]), 2),
            ("old-3", json.dumps([]), 0),
            ("broken", "{not json", 1),
            ("not-a-list", json.dumps({"a": 1}), 1),
        ],
    )
    con.commit()
    con.close()

    config = make_config(session_store_path=str(db))
    d = await start_daemon(config)
    m = d.daemon.default.manager
    assert set(m.sessions) == {"old-1", "old-2", "old-3"}  # corrupt rows skipped
    assert m.sessions["old-1"].turn_count == 7
    assert m.sessions["old-1"].suspended is False and len(m.forks) == 0
    assert d.refcounts() == {"sys": 2, "h1": 1, "h2": 1, "h3": 1}
    assert await d.ok("session_map", session_id="old-1") == {
        "session_id": "old-1",
        "chunk_hashes": ["sys", "h1", "h1", "h2"],
    }
    await d.turn_end("old-2", ["sys", "h4"])
    await d.close()

    # The original table kept its shape; our rows sit beside it.
    con = sqlite3.connect(db)
    cols = [(r[1], r[2], r[3], r[4], r[5]) for r in con.execute("PRAGMA table_info(sessions)")]
    row = con.execute(
        "SELECT map_json, turn_count FROM sessions WHERE session_id='old-2'"
    ).fetchone()
    con.close()
    assert cols == [
        ("session_id", "TEXT", 0, None, 1),
        ("map_json", "TEXT", 1, None, 0),
        ("turn_count", "INTEGER", 1, "0", 0),
    ]
    assert json.loads(row[0]) == ["sys", "h4"] and row[1] == 3

    d2 = await start_daemon(config)
    m2 = d2.daemon.default.manager
    assert d2.refcounts() == recompute_refcounts(m2.sessions.values(), m2.forks.values())
    assert d2.refcounts()["h4"] == 1


async def test_schema_of_new_database(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    config = make_config()
    d = await start_daemon(config)
    await d.turn_end("s", ["a"])
    con = sqlite3.connect(config.session_store_path)
    try:
        mode = con.execute("PRAGMA journal_mode").fetchone()[0]
        row = con.execute("SELECT session_id, map_json, turn_count FROM sessions").fetchall()
    finally:
        con.close()
    assert mode == "wal"
    assert row == [("s", '["a"]', 1)]


async def test_concurrent_events_memory_equals_disk(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    """Hundreds of concurrent events over shared chunks: memory, disk and refcounts agree."""
    import asyncio
    import random

    config = make_config()
    d = await start_daemon(config)
    rng = random.Random(7)
    sids = [f"c{i}" for i in range(8)]
    pool = [f"h{i}" for i in range(24)]

    def payload() -> dict[str, Any]:
        sid = rng.choice(sids)
        kind = rng.choices(
            [
                "turn_end",
                "session_fork",
                "session_fork_end",
                "session_suspend",
                "snapshot_restore",
                "session_close",
            ],
            weights=[10, 2, 2, 1, 1, 1],
        )[0]
        if kind == "turn_end":
            hashes = rng.sample(pool, rng.randint(0, 8))
            return {"type": kind, "session_id": sid, "kv_transfer_params": {"chunk_hashes": hashes}}
        return {"type": kind, "session_id": sid}

    for _ in range(4):
        answers = await asyncio.gather(*(d.post(payload()) for _ in range(100)))
        assert all(status == 200 for status, _ in answers)
        d.assert_consistent()
    before = full_state(d)
    await d.close()
    d2 = await start_daemon(config)
    after = full_state(d2)
    assert after == before
    d2.assert_consistent()
