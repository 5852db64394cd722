"""GET /trace with real aiohttp websocket clients: snapshot + deltas, seq, since, session filter."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from support.daemon_app import DaemonClient, StartDaemon
from support.trace_wire import apply_record, recv, recv_n


def hashes(prefix: str, n: int) -> list[str]:
    """``n`` distinct chunk hashes."""
    return [f"{prefix}{i:03d}" for i in range(n)]


async def catch_up(d: DaemonClient, ws: aiohttp.ClientWebSocketResponse, state: dict) -> None:
    """Fold records until ``state`` is at the daemon's current seq (query events add records)."""
    while state["seq"] < d.daemon.trace.seq:
        apply_record(state, await recv(ws))


async def check_state_matches_daemon(d: DaemonClient, state: dict[str, Any]) -> None:
    """The folded trace equals what list_sessions, session_chunks and chunk_info report.

    Protocol 2 sends summaries, not maps: every session's counts, and the refcounts of
    the chunks that the deltas named. These queries are events too: the caller folds
    their (empty-delta) records afterwards.
    """
    rows = await d.sessions_view()
    assert set(rows) == set(state["sessions"])
    for sid, s in state["sessions"].items():
        row = rows[sid]
        for key in ("state", "turn_count", "chunk_count", "fork_holds", "last_event_ts"):
            assert row[key] == s[key], (sid, key)
    if state["refcounts"]:
        every = sorted(state["refcounts"])
        info = (await d.ok("chunk_info", chunk_hashes=every))["chunks"]
        for h in every:
            assert info[h]["refcount"] == state["refcounts"][h], h
    m = d.daemon.default.manager
    assert state["totals"] == {
        "sessions": len(m.sessions),
        "chunks": len(m.refcounts),
        "references": sum(m.refcounts.counts.values()),
    }


async def test_snapshot_then_deltas_reproduce_daemon_state(daemon: DaemonClient) -> None:
    d = daemon
    shared = hashes("sys", 3)
    await d.turn_end("pre", [*shared, "pre-a", "pre-b"])
    await d.ok("session_fork", session_id="pre")
    ws = await d.ws()
    state: dict[str, Any] = {}
    snap = await recv(ws)
    assert snap["kind"] == "snapshot" and snap["seq"] == 2 and snap["protocol"] == 2
    pre = snap["sessions"]["pre"]
    assert pre == {
        "session_id": "pre",
        "state": "active",
        "turn_count": 1,
        "chunk_count": 5,
        "shared_count": 0,
        "fork_holds": 1,  # its own fork's references are not sharing
        "forks": [
            {
                "fork_id": 1,
                "session_id": "pre",
                "created_ts": pre["forks"][0]["created_ts"],
                "chunk_count": 5,
            }
        ],
        "last_event_ts": pre["last_event_ts"],
    }
    assert snap["refcounts"] == {}  # never sent unfiltered: chunk_top pages them
    assert snap["totals"] == {"sessions": 1, "chunks": 5, "references": 10}
    apply_record(state, snap)
    await check_state_matches_daemon(d, state)
    await catch_up(d, ws, state)

    script: list[dict[str, Any]] = [
        {
            "type": "turn_end",
            "session_id": "a",
            "kv_transfer_params": {"chunk_hashes": [*shared, "a1", "a2", "a1"]},
        },
        {
            "type": "turn_end",
            "session_id": "b",
            "kv_transfer_params": {"chunk_hashes": [*shared, "b1"]},
        },
        {"type": "turn_start", "session_id": "a"},
        {
            "type": "turn_end",
            "session_id": "pre",
            "kv_transfer_params": {"chunk_hashes": [*shared, "pre-c"]},
        },
        {"type": "session_fork_end", "session_id": "pre"},
        {"type": "session_fork", "session_id": "b"},
        {"type": "turn_end", "session_id": "b", "kv_transfer_params": {"chunk_hashes": ["b9"]}},
        {"type": "session_suspend", "session_id": "a"},
        {"type": "session_fork_end", "session_id": "nobody"},  # fails
        {"type": "snapshot_restore", "session_id": "a"},
        {"type": "session_suspend", "session_id": "a"},
        {"type": "chunk_evict", "chunk_hashes": ["sys001", "zzz"], "force": True},
        {"type": "session_close", "session_id": "pre"},
        {"type": "session_map", "session_id": "b"},
        {"type": "health"},
        {"type": "no_such_event"},  # fails
        {"type": "session_fork_end", "session_id": "b"},
    ]
    for step, payload in enumerate(script):
        status, body = await d.post(payload)
        assert status == 200, body
        rec = await recv(ws)
        assert rec["kind"] == "event" and rec["type"] == payload["type"], (step, rec)
        assert rec["ok"] is body["ok"], (step, rec, body)
        assert rec["session_id"] == payload.get("session_id")
        assert isinstance(rec["ts"], float)
        if body["ok"]:
            assert rec["data"] == body["data"] and "error" not in rec
            assert {"prefetch", "evict", "demote"} <= set(rec)
        else:
            assert rec["error"] == body["error"] and "data" not in rec
            assert rec["delta"] == {"sessions": {}, "refcounts": {}}
        apply_record(state, rec)
        await check_state_matches_daemon(d, state)
        await catch_up(d, ws, state)
    # A fresh snapshot agrees with the folded stream.
    ws2 = await d.ws()
    fresh = await recv(ws2)
    assert fresh["seq"] == state["seq"]
    assert fresh["totals"] == state["totals"]

    # Deltas carry the shared_count of the sessions they list; others' values moved by a
    # record's shared_changed are re-read with list_sessions (test_trace_shared_counts).
    def counts(sessions: dict[str, Any]) -> dict[str, Any]:
        return {k: {f: v for f, v in s.items() if f != "shared_count"} for k, s in sessions.items()}

    assert counts(fresh["sessions"]) == counts(state["sessions"])
    await ws.close()
    await ws2.close()


async def test_records_carry_backend_lists(daemon: DaemonClient) -> None:
    d = daemon
    await d.turn_end("s", ["h1", "h2", "h1"])
    ws = await d.ws()
    await recv(ws)
    await d.ok("turn_start", session_id="s")
    rec = await recv(ws)
    assert rec["prefetch"] == ["h1", "h2"] and rec["evict"] == [] and rec["demote"] == []
    await d.ok("session_suspend", session_id="s")
    rec = await recv(ws)
    assert sorted(rec["demote"]) == ["h1", "h2"] and rec["evict"] == []
    assert rec["delta"]["refcounts"] == {"h1": 0, "h2": 0}
    assert rec["delta"]["sessions"]["s"]["state"] == "suspended"
    await d.ok("session_close", session_id="s")
    rec = await recv(ws)
    assert sorted(rec["evict"]) == ["h1", "h2"]
    assert rec["delta"]["sessions"] == {"s": None}
    await ws.close()


async def test_seq_gap_free_under_500_concurrent_events(daemon: DaemonClient) -> None:
    d = daemon
    subs = [await d.ws(), await d.ws()]
    states: list[dict[str, Any]] = [{} for _ in subs]
    for ws, st in zip(subs, states, strict=True):
        apply_record(st, await recv(ws))
    start = states[0]["seq"]

    def payload(i: int) -> dict[str, Any]:
        sid = f"s{i % 40}"
        kind = i % 5
        if kind in (0, 1):
            return {
                "type": "turn_end",
                "session_id": sid,
                "kv_transfer_params": {"chunk_hashes": ["shared", f"c{i % 7}", f"u{i}"]},
            }
        if kind == 2:
            return {"type": "turn_start", "session_id": sid}
        if kind == 3:
            return {"type": "session_fork_end", "session_id": sid}  # mostly fails
        return {"type": "health"}

    async def reader(ws: aiohttp.ClientWebSocketResponse, st: dict[str, Any]) -> list[int]:
        got = await recv_n(ws, 500)
        for rec in got:
            apply_record(st, rec)  # asserts seq == previous + 1
        return [r["seq"] for r in got]

    readers = [asyncio.create_task(reader(ws, st)) for ws, st in zip(subs, states, strict=True)]
    answers = await asyncio.gather(*(d.post(payload(i)) for i in range(500)))
    assert all(status == 200 for status, _ in answers)
    seqs = await asyncio.wait_for(asyncio.gather(*readers), 30)
    for got in seqs:
        assert got == list(range(start + 1, start + 501))
    assert d.daemon.trace.seq == start + 500
    for ws, st in zip(subs, states, strict=True):
        await check_state_matches_daemon(d, st)
        await catch_up(d, ws, st)
    for ws in subs:
        await ws.close()


async def test_resume_with_since_replays_missed_events(daemon: DaemonClient) -> None:
    d = daemon
    ws = await d.ws()
    snap = await recv(ws)
    await d.turn_end("a", ["x"])
    last = (await recv(ws))["seq"]
    await ws.close()
    for i in range(4):  # missed while disconnected
        await d.turn_end("a", ["x", f"y{i}"])
    ws = await d.ws(f"?since={last}")
    missed = await recv_n(ws, 4)
    assert [r["seq"] for r in missed] == [last + 1, last + 2, last + 3, last + 4]
    assert all(r["kind"] == "event" for r in missed)
    # Live events follow the replay without a gap.
    await d.ok("health")
    live = await recv(ws)
    assert live["seq"] == last + 5 and live["type"] == "health"
    await ws.close()
    # since == the current seq: nothing replayed, the next live event comes first.
    ws = await d.ws(f"?since={live['seq']}")
    await d.ok("health")
    nxt = await recv(ws)
    assert nxt["kind"] == "event" and nxt["seq"] == live["seq"] + 1
    await ws.close()
    assert snap["seq"] == 0


async def recv_snapshot(d: DaemonClient, query: str = "") -> dict[str, Any]:
    """A fresh snapshot (connect, read the first message, close)."""
    ws = await d.ws(query)
    try:
        return await recv(ws)
    finally:
        await ws.close()


async def test_since_falls_back_to_snapshot_when_ring_lost_events(
    start_daemon: StartDaemon,
) -> None:
    d = await start_daemon(trace_buffer=5)
    await d.turn_end("a", ["x"])
    since = d.daemon.trace.seq
    for i in range(10):  # more than the ring holds
        await d.turn_end("a", ["x", f"y{i}"])
    ws = await d.ws(f"?since={since}")
    first = await recv(ws)
    assert first["kind"] == "snapshot"
    assert first["seq"] == since + 10
    assert first["sessions"]["a"]["chunk_count"] == 2
    assert first["totals"] == {"sessions": 1, "chunks": 2, "references": 2}
    state: dict[str, Any] = {}
    apply_record(state, first)
    await d.turn_end("a", ["z"])
    apply_record(state, await recv(ws))
    await check_state_matches_daemon(d, state)
    await ws.close()
    # Still in the ring: the last 5 are replayed, not a snapshot.
    now = d.daemon.trace.seq
    ws = await d.ws(f"?since={now - 5}")
    replayed = await recv_n(ws, 5)
    assert [r["seq"] for r in replayed] == list(range(now - 4, now + 1))
    await ws.close()
    # One further back is gone from the ring: snapshot.
    first = await recv_snapshot(d, f"?since={now - 6}")
    assert first["kind"] == "snapshot" and first["seq"] == now
    # A seq from the future (e.g. a restarted daemon) and a negative one: snapshot.
    for bad in (now + 1000, -1):
        first = await recv_snapshot(d, f"?since={bad}")
        assert first["kind"] == "snapshot" and first["seq"] == now
    # The epoch of another run (a restarted daemon numbers from 1 again): snapshot, never a
    # replay of this run's records; this run's epoch: replay.
    epoch = first["epoch"]
    assert isinstance(epoch, str) and epoch
    first = await recv_snapshot(d, f"?since={now - 1}&epoch=0000000000000000")
    assert first["kind"] == "snapshot" and first["seq"] == now
    first = await recv_snapshot(d, f"?since={now - 1}&epoch={epoch}")
    assert first["kind"] == "event" and first["seq"] == now and first["epoch"] == epoch
    resp = await d.client.get("/trace?since=abc")
    assert resp.status == 400
    assert "since must be an integer" in await resp.text()


async def test_session_filter(daemon: DaemonClient) -> None:
    d = daemon
    await d.turn_end("a", ["shared", "a1"])
    await d.turn_end("b", ["shared", "b1"])
    ws = await d.ws("?session=a")
    snap = await recv(ws)
    assert snap["kind"] == "snapshot" and snap["seq"] == 2
    assert set(snap["sessions"]) == {"a"}
    assert snap["refcounts"] == {"shared": 2, "a1": 1}
    await d.turn_end("b", ["shared", "b2"])
    await d.ok("turn_start", session_id="b")
    await d.err("session_fork_end", session_id="b")
    await d.turn_end("a", ["shared", "a2"])  # seq 6
    rec = await recv(ws)
    assert rec["seq"] == 6 and rec["session_id"] == "a"
    assert rec["delta"]["refcounts"] == {"a1": 0, "a2": 1}
    await d.err("session_fork_end", session_id="a")  # failed events of a are shown too
    rec = await recv(ws)
    assert rec["seq"] == 7 and rec["ok"] is False
    # An event with no session_id whose delta touches a (forced eviction) is shown too.
    await d.ok("health")
    await d.ok("chunk_evict", chunk_hashes=["b2"], force=True)  # touches b only
    await d.ok("chunk_evict", chunk_hashes=["a2"], force=True)  # seq 10
    rec = await recv(ws)
    assert rec["seq"] == 10 and rec["session_id"] is None and "a" in rec["delta"]["sessions"]
    await d.ok("session_close", session_id="a")
    rec = await recv(ws)
    assert rec["seq"] == 11 and rec["delta"]["sessions"] == {"a": None}
    # A filter naming an unknown session: empty snapshot, then only its events.
    ws2 = await d.ws("?session=later")
    snap2 = await recv(ws2)
    assert snap2["sessions"] == {} and snap2["refcounts"] == {}
    await d.ok("health")
    await d.turn_end("later", ["q"])
    rec = await recv(ws2)
    assert rec["session_id"] == "later" and rec["seq"] == 13
    # ?since= with a filter replays only that session's records.
    ws3 = await d.ws("?session=a&since=5")
    replayed = await recv_n(ws3, 4)
    assert [r["seq"] for r in replayed] == [6, 7, 10, 11]
    for w in (ws, ws2, ws3):
        await w.close()


async def test_many_subscribers_and_unsubscribe(daemon: DaemonClient) -> None:
    d = daemon
    subs = [await d.ws() for _ in range(20)]
    for ws in subs:
        await recv(ws)
    assert len(d.daemon.trace.subscribers) == 20
    await d.turn_end("s", ["h"])
    for ws in subs:
        assert (await recv(ws))["type"] == "turn_end"
    for ws in subs[:10]:
        await ws.close()
    await d.ok("health")
    for ws in subs[10:]:
        assert (await recv(ws))["type"] == "health"
    for _ in range(12000):  # hang guard
        if len(d.daemon.trace.subscribers) == 10:
            break
        await asyncio.sleep(0.01)
    assert len(d.daemon.trace.subscribers) == 10
    for ws in subs[10:]:
        await ws.close()


async def test_session_filter_finds_the_failed_events_of_a_long_session_id(
    daemon: DaemonClient,
) -> None:
    """A valid session id of 201..1024 bytes is the record's session_id whole: ?session=
    delivers its failed events (it was cut to 200 characters before the filter ran)."""
    d = daemon
    long_id = "s" * 300
    await d.turn_end(long_id, ["x1"])
    ws = await d.ws(f"?session={long_id}")
    snap = await recv(ws)
    assert set(snap["sessions"]) == {long_id}
    await d.err("session_fork_end", session_id=long_id)  # fails: no open fork
    await d.ok("turn_start", session_id=long_id)
    failed, ok = await recv_n(ws, 2)
    assert failed["ok"] is False and failed["session_id"] == long_id
    assert ok["ok"] is True and ok["type"] == "turn_start"
    # An id longer than any session's is cut in its record (the ring stays small).
    await d.err("turn_start", session_id="z" * 5000)
    [text] = d.daemon.trace.recent(1)
    rec = json.loads(text)
    assert rec["ok"] is False and rec["session_id"] == "z" * 200 + "..."
    await ws.close()
