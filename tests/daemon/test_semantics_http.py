"""Refcount semantics through HTTP: suspend/restore/close, forks, shared chunks, evict intent."""

from __future__ import annotations

from typing import Any

import pytest
from support.daemon_app import DaemonClient, RecordingBackend


async def trace_snapshot(d: DaemonClient, session: str | None = None) -> dict[str, Any]:
    """A whole GET /trace snapshot (header and parts); ``refcounts`` are the daemon's
    (chunk_top, every page) unless filtered by session (the parts carry them then)."""
    path = "/trace?protocol=2" + (f"&session={session}" if session else "")
    ws = await d.client.ws_connect(path)
    try:
        msg = await ws.receive_json(timeout=120)
        assert msg["kind"] == "snapshot"
        msg["sessions"], msg["refcounts"] = {}, {}
        while True:
            part = await ws.receive_json(timeout=120)
            msg["sessions"].update((r["session_id"], r) for r in part["sessions"])
            msg["refcounts"].update(part["refcounts"])
            if part["last"]:
                break
    finally:
        await ws.close()
    if session is None:
        top = await d.ok("chunk_top", limit=500)
        msg["refcounts"] = {c["hash"]: c["refcount"] for c in top["chunks"]}
    return msg


async def test_shared_chunk_survives_one_close(
    rec_daemon: tuple[DaemonClient, RecordingBackend],
) -> None:
    d, backend = rec_daemon
    await d.turn_end("s1", ["sys", "a1"])
    await d.turn_end("s2", ["sys", "b1"])
    snap = await trace_snapshot(d)
    assert snap["refcounts"] == {"sys": 2, "a1": 1, "b1": 1}
    assert set(snap["sessions"]) == {"s1", "s2"}

    assert await d.ok("session_close", session_id="s1") == {"evicted_count": 1, "closed": True}
    await d.settle()
    assert backend.of("delete") == ["a1"]
    snap = await trace_snapshot(d)
    assert snap["refcounts"] == {"sys": 1, "b1": 1}
    assert set(snap["sessions"]) == {"s2"}

    assert await d.ok("session_close", session_id="s2") == {"evicted_count": 2, "closed": True}
    await d.settle()
    # sys was shared by two sessions within retain_unreferenced_s: a prefix, not deleted
    # by the second close either (ordered cold); b1 was s2's alone and goes.
    assert sorted(backend.of("delete")) == ["a1", "b1"]
    assert backend.of("cold") == ["sys"]
    assert (await trace_snapshot(d))["refcounts"] == {}


async def test_shared_chunk_survives_turn_end_of_one(daemon: DaemonClient) -> None:
    await daemon.turn_end("s1", ["sys", "a"])
    await daemon.turn_end("s2", ["sys", "b"])
    assert (await daemon.turn_end("s1", ["a"]))["evicted_count"] == 0
    assert daemon.refcounts() == {"sys": 1, "a": 1, "b": 1}


async def test_trace_snapshot_filtered_by_session(daemon: DaemonClient) -> None:
    await daemon.turn_end("s1", ["sys", "a"])
    await daemon.turn_end("s2", ["sys", "b"])
    snap = await trace_snapshot(daemon, "s1")
    assert set(snap["sessions"]) == {"s1"}
    assert snap["refcounts"] == {"sys": 2, "a": 1}


async def test_trace_event_messages_carry_delta(daemon: DaemonClient) -> None:
    ws = await daemon.client.ws_connect("/trace?protocol=2")
    try:
        await ws.receive_json(timeout=120)
        await ws.receive_json(timeout=120)  # the snapshot's one part
        await daemon.turn_end("s1", ["a", "b"])
        msg = await ws.receive_json(timeout=120)
        assert msg["kind"] == "event" and msg["type"] == "turn_end" and msg["ok"] is True
        assert msg["data"] == {"evicted_count": 0, "map_updated": True, "debug_written": False}
        assert msg["delta"]["refcounts"] == {"a": 1, "b": 1}
        assert msg["delta"]["sessions"]["s1"]["chunk_count"] == 2  # a summary, not the map
        await daemon.turn_end("s1", ["b"])
        msg = await ws.receive_json(timeout=120)
        assert msg["delta"]["refcounts"] == {"a": 0}  # only what changed
        await daemon.post({"type": "session_map", "session_id": "ghost"})
        msg = await ws.receive_json(timeout=120)
        assert msg["ok"] is False and msg["error"] == "session 'ghost' not found"
        assert "data" not in msg
    finally:
        await ws.close()


async def test_suspend_keeps_map_restore_brings_it_back(
    rec_daemon: tuple[DaemonClient, RecordingBackend],
) -> None:
    d, backend = rec_daemon
    await d.turn_end("s1", ["a", "b", "shared"])
    await d.turn_end("s2", ["shared"])
    assert await d.ok("session_suspend", session_id="s1") == {
        "evicted_count": 2,
        "suspended": True,
    }
    await d.settle()
    # Suspend demotes (DDR out, disk kept); the shared chunk is still referenced by s2.
    assert sorted(backend.of("demote")) == ["a", "b"] and backend.of("delete") == []
    assert d.refcounts() == {"shared": 1}
    # A suspended session still answers session_map and counts in health.
    assert await d.ok("session_map", session_id="s1") == {
        "session_id": "s1",
        "chunk_hashes": ["a", "b", "shared"],
    }
    assert (await d.ok("health"))["sessions_count"] == 2
    # turn_start of a suspended session prefetches nothing.
    assert await d.ok("turn_start", session_id="s1") == {
        "prefetch_sent": False,
        "prefetch_count": 0,
    }
    assert await d.ok("snapshot_restore", session_id="s1") == {
        "prefetch_sent": True,
        "prefetch_count": 3,
    }
    assert d.refcounts() == {"a": 1, "b": 1, "shared": 2}
    assert d.daemon.default.manager.sessions["s1"].suspended is False
    d.assert_consistent()


async def test_turn_end_on_suspended_session_reactivates(daemon: DaemonClient) -> None:
    await daemon.turn_end("s1", ["a", "b"])
    await daemon.ok("session_suspend", session_id="s1")
    # a was demoted at suspend and is now left out of the map: deleted, and counted.
    assert await daemon.turn_end("s1", ["b", "c"]) == {
        "evicted_count": 1,
        "map_updated": True,
        "debug_written": False,
    }
    assert daemon.daemon.default.manager.sessions["s1"].suspended is False
    assert daemon.refcounts() == {"b": 1, "c": 1}
    daemon.assert_consistent()


async def test_refused_turn_end_on_suspended_session_leaves_it_suspended(
    daemon: DaemonClient,
) -> None:
    await daemon.turn_end("s1", ["a"])
    await daemon.ok("session_suspend", session_id="s1")
    await daemon.err("turn_end", session_id="s1", kv_transfer_params={})
    assert daemon.daemon.default.manager.sessions["s1"].suspended is True
    assert daemon.refcounts() == {}
    daemon.assert_consistent()


async def test_close_of_suspended_session_deletes_untaken_chunks(
    rec_daemon: tuple[DaemonClient, RecordingBackend],
) -> None:
    d, backend = rec_daemon
    await d.turn_end("s1", ["a", "b", "c"])
    await d.ok("session_suspend", session_id="s1")
    await d.turn_end("s2", ["b"])  # takes b up again after the demote
    await d.settle()
    backend.calls.clear()
    # a and c were demoted and nobody took them: close deletes them; b stays (s2 holds it).
    assert await d.ok("session_close", session_id="s1") == {"evicted_count": 2, "closed": True}
    await d.settle()
    assert sorted(backend.of("delete")) == ["a", "c"] and backend.of("demote") == []
    assert d.refcounts() == {"b": 1}
    status, body = await d.post({"type": "session_map", "session_id": "s1"})
    assert body == {"ok": False, "type": "session_map", "error": "session 's1' not found"}
    d.assert_consistent()


async def test_fork_end_releases_snapshot_not_current_map(
    rec_daemon: tuple[DaemonClient, RecordingBackend],
) -> None:
    d, backend = rec_daemon
    await d.turn_end("p", ["a", "b", "c"])
    await d.ok("session_fork", session_id="p")
    assert d.refcounts() == {"a": 2, "b": 2, "c": 2}
    # The parent moves on: a and b leave its map, but the fork still holds them.
    assert (await d.turn_end("p", ["c", "d"]))["evicted_count"] == 0
    assert d.refcounts() == {"a": 1, "b": 1, "c": 2, "d": 1}
    await d.settle()
    assert backend.of("delete") == []
    assert await d.ok("session_fork_end", session_id="p") == {"fork_end": True, "fork_id": 1}
    await d.settle()
    # A refcount reaching 0 is ordered cold, never deleted.
    assert backend.of("delete") == [] and sorted(backend.of("cold")) == ["a", "b"]
    assert d.refcounts() == {"c": 1, "d": 1}
    assert (await d.ok("session_map", session_id="p"))["chunk_hashes"] == ["c", "d"]
    d.assert_consistent()


async def test_forks_nest_newest_first(daemon: DaemonClient) -> None:
    m = daemon.daemon.default.manager
    await daemon.turn_end("p", ["a", "b"])
    await daemon.ok("session_fork", session_id="p")  # holds (a, b)
    await daemon.turn_end("p", ["b", "c"])
    await daemon.ok("session_fork", session_id="p")  # holds (b, c)
    assert [f.hashes for f in m.forks.of("p")] == [("a", "b"), ("b", "c")]
    assert daemon.refcounts() == {"a": 1, "b": 3, "c": 2}
    await daemon.turn_end("p", ["e"])
    assert daemon.refcounts() == {"a": 1, "b": 2, "c": 1, "e": 1}
    await daemon.ok("session_fork_end", session_id="p")  # pops (b, c)
    assert [f.hashes for f in m.forks.of("p")] == [("a", "b")]
    assert daemon.refcounts() == {"a": 1, "b": 1, "e": 1}
    await daemon.ok("session_fork_end", session_id="p")  # pops (a, b)
    assert daemon.refcounts() == {"e": 1}
    status, body = await daemon.post({"type": "session_fork_end", "session_id": "p"})
    assert body == {
        "ok": False,
        "type": "session_fork_end",
        "error": "session 'p' has no open fork",
    }
    daemon.assert_consistent()


async def test_fork_hold_outlives_suspend_and_close(daemon: DaemonClient) -> None:
    await daemon.turn_end("p", ["a", "b"])
    await daemon.ok("session_fork", session_id="p")
    assert await daemon.ok("session_suspend", session_id="p") == {
        "evicted_count": 0,
        "suspended": True,
    }
    assert daemon.refcounts() == {"a": 1, "b": 1}  # the fork's hold
    await daemon.ok("session_fork_end", session_id="p")
    assert daemon.refcounts() == {}
    await daemon.turn_end("q", ["x"])
    await daemon.ok("session_fork", session_id="q")
    await daemon.ok("session_fork", session_id="q")
    assert daemon.refcounts() == {"x": 3}
    # The parent's close releases its map only: both subagents still hold x.
    assert await daemon.ok("session_close", session_id="q") == {"evicted_count": 0, "closed": True}
    assert daemon.refcounts() == {"x": 2}
    assert await daemon.ok("session_fork_end", session_id="q", fork_id=2) == {
        "fork_end": True,
        "fork_id": 2,
    }
    assert await daemon.ok("session_fork_end", session_id="q") == {"fork_end": True, "fork_id": 3}
    assert daemon.refcounts() == {}
    daemon.assert_consistent()


async def test_shared_chunk_across_fork_and_sessions(daemon: DaemonClient) -> None:
    await daemon.turn_end("p", ["sys", "p1"])
    await daemon.ok("session_fork", session_id="p")
    await daemon.ok("snapshot_restore", session_id="child", source_session_id="p")
    await daemon.turn_end("child", ["sys", "p1", "c1"])
    assert daemon.refcounts() == {"sys": 3, "p1": 3, "c1": 1}
    await daemon.ok("session_close", session_id="p")  # the fork still holds sys, p1
    assert daemon.refcounts() == {"sys": 2, "p1": 2, "c1": 1}
    await daemon.ok("session_fork_end", session_id="p")
    assert daemon.refcounts() == {"sys": 1, "p1": 1, "c1": 1}
    daemon.assert_consistent()


@pytest.mark.parametrize("resume", ["turn_end", "restore_from_source"])
async def test_resumed_suspended_session_deletes_abandoned_chunks(
    rec_daemon: tuple[DaemonClient, RecordingBackend], resume: str
) -> None:
    d, backend = rec_daemon
    await d.turn_end("src", ["c"])
    await d.turn_end("s", ["a", "b", "c"])
    await d.ok("session_suspend", session_id="s")  # a, b demoted (c still held by src)
    if resume == "turn_end":
        await d.turn_end("s", ["c"])
    else:
        await d.ok("snapshot_restore", session_id="s", source_session_id="src")
    await d.settle()
    if resume == "turn_end":
        assert sorted(backend.of("demote")) == ["a", "b"]
        # a and b left every map and nobody references them: a turn_end declares it,
        # so they go from every tier, as a declared session_close would have done.
        assert sorted(backend.of("delete")) == ["a", "b"]
    else:
        # A restore from another map is a map moving on: a and b (demoted by the declared
        # suspend) are ordered cold, left for the retention sweep.
        assert sorted(backend.of("demote")) == ["a", "b"]
        assert sorted(backend.of("cold")) == ["a", "b"]
        assert backend.of("delete") == []
    assert d.daemon.default.manager.parked == {}
