"""A store that cannot write: events answer ok:false (503), memory rolls back (turn_start's
time too: it is stored), reads keep working."""

from __future__ import annotations

import asyncio

from support.daemon_app import DaemonClient
from support.reliability import set_query_only

from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.ports import WriteBatch


class FlakyStore(SqliteSessionStore):
    """A real SQLite store whose writes raise while ``failing`` is set."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.failing = False
        self.writes = 0

    async def write(self, batch: WriteBatch) -> None:
        self.writes += 1
        if self.failing:
            # One loop step: concurrent events queue behind this batch (the assertions hold
            # whichever batch each lands in: every write fails while ``failing`` is set).
            await asyncio.sleep(0)
            raise OSError(28, "No space left on device")
        await super().write(batch)


async def seed(d: DaemonClient) -> None:
    await d.turn_end("s1", ["sys", "a", "b"])
    await d.turn_end("s2", ["sys", "c"])
    await d.ok("session_fork", session_id="s2")
    await d.turn_end("s3", ["z"])
    await d.ok("session_suspend", session_id="s3")


async def assert_reads_work(d: DaemonClient) -> None:
    assert await d.ok("health") == {"status": "running", "sessions_count": 3}
    assert await d.ok("session_map", session_id="s1") == {
        "session_id": "s1",
        "chunk_hashes": ["sys", "a", "b"],
    }
    assert await d.ok("session_map", session_id="s3") == {
        "session_id": "s3",
        "chunk_hashes": ["z"],
    }
    # A session the daemon does not know: the turn_start stores nothing, and answers.
    assert await d.ok("turn_start", session_id="unknown") == {
        "prefetch_sent": False,
        "prefetch_count": 0,
    }
    assert "events" in await d.ok("list_events")


WRITES = [
    {"type": "turn_end", "session_id": "s1", "kv_transfer_params": {"chunk_hashes": ["d"]}},
    {"type": "turn_end", "session_id": "new", "kv_transfer_params": {"chunk_hashes": ["sys"]}},
    {"type": "session_close", "session_id": "s1"},
    {"type": "session_suspend", "session_id": "s1"},
    {"type": "session_fork", "session_id": "s1"},
    {"type": "session_fork_end", "session_id": "s2"},
    {"type": "snapshot_restore", "session_id": "s3"},
    {"type": "snapshot_restore", "session_id": "copy", "source_session_id": "s1"},
    # Its time is stored (the idle clock counts from it after a restart): a write too.
    {"type": "turn_start", "session_id": "s1"},
]


async def test_failing_writes_roll_back(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    config = make_config()
    store = FlakyStore(config.session_store_path)
    d = await start_daemon(config, store=store)
    await seed(d)
    before = d.state()
    store.failing = True

    for payload in WRITES:
        status, body = await d.post(payload)
        assert status == 503, (payload, body)
        assert body == {
            "ok": False,
            "type": payload["type"],
            "error": "persistence failed: [Errno 28] No space left on device",
        }, payload
        assert d.state() == before, payload
        d.assert_consistent()
    await assert_reads_work(d)

    # Concurrent writes (one per session) that share a failed batch all fail and roll back.
    concurrent = [WRITES[i] for i in (0, 1, 5, 6)] + [
        {"type": "turn_end", "session_id": f"n{i}", "kv_transfer_params": {"chunk_hashes": ["sys"]}}
        for i in range(6)
    ]
    answers = await asyncio.gather(*(d.post(p) for p in concurrent))
    assert all(status == 503 and body["ok"] is False for status, body in answers)
    assert d.state() == before
    d.assert_consistent()

    # The disk recovers: writes succeed again and survive a restart.
    store.failing = False
    assert (await d.turn_end("s1", ["d"]))["evicted_count"] == 2
    after = d.state()
    await d.close()
    d2 = await start_daemon(config)
    assert d2.state() == after


async def test_read_only_database(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    """A real SQLite refusal (query_only, since root ignores file modes): same promises."""
    config = make_config()
    store = SqliteSessionStore(config.session_store_path)
    d = await start_daemon(config, store=store)
    await seed(d)
    before = d.state()
    await set_query_only(store, True)

    for payload in WRITES[:3]:
        status, body = await d.post(payload)
        assert status == 503 and body["ok"] is False and "data" not in body, body
        assert body["error"].startswith("persistence failed: "), body
        assert "readonly" in body["error"] or "read-only" in body["error"], body
        assert d.state() == before
    await assert_reads_work(d)

    await set_query_only(store, False)
    assert (await d.turn_end("s1", ["e"]))["map_updated"] is True
    d.assert_consistent()
