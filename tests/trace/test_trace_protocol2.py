"""Protocol 2 specifics: bounded messages and resync, paged admin reads, history, filtered
refcounts caused by other sessions, a plain connect served, other versions refused with a
reason."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from support.daemon_app import DaemonClient, StartDaemon
from support.daemon_proc import DaemonProcess
from support.trace_wire import apply_record, recv, recv_raw

from ramakv_daemon.trace import protocol as trace_protocol


async def turn_end(http: aiohttp.ClientSession, url: str, sid: str) -> dict[str, Any]:
    """One turn_end over HTTP (the answer's envelope)."""
    body = {"type": "turn_end", "session_id": sid, "kv_transfer_params": {"chunk_hashes": ["a"]}}
    async with http.post(f"{url}/event", json=body) as resp:
        return dict(await resp.json())


async def test_a_plain_connect_gets_protocol_2_and_another_version_a_close_reason(
    daemon_proc: DaemonProcess,
) -> None:
    """A real daemon process over a real websocket: no ``protocol`` (websocat, a script that
    knows no versions) is served protocol 2; an explicit version it does not speak is closed
    with 4010 and the reason, as before."""
    async with aiohttp.ClientSession() as http:
        assert (await turn_end(http, daemon_proc.url, "s1"))["ok"]
        async with http.ws_connect(f"{daemon_proc.url}/trace") as ws:
            snap = await recv(ws)
            assert snap["kind"] == "snapshot" and snap["protocol"] == 2
            assert set(snap["sessions"]) == {"s1"}
            assert (await turn_end(http, daemon_proc.url, "s2"))["ok"]
            live = await recv(ws)
            assert live["kind"] == "event" and live["session_id"] == "s2"
            assert live["seq"] == snap["seq"] + 1
        for query in ("?protocol=2", "?protocol="):  # as the SDK and console ask; empty = absent
            async with http.ws_connect(f"{daemon_proc.url}/trace{query}") as ws:
                assert (await recv(ws))["kind"] == "snapshot"
        for version in ("1", "3", "two"):
            async with http.ws_connect(f"{daemon_proc.url}/trace?protocol={version}") as ws:
                msg = await ws.receive(timeout=120)
                assert msg.type == aiohttp.WSMsgType.CLOSE and ws.close_code == 4010
                assert msg.extra == trace_protocol.PROTOCOL_REASON


async def test_snapshot_parts_stay_under_the_bound(
    start_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ramakv_daemon.trace.snapshot.PART_BYTES", 2000)
    d = await start_daemon()
    for i in range(60):
        await d.turn_end(f"s{i:02d}", ["sys", f"own{i}"])
    ws = await d.ws()
    header = await recv_raw(ws)
    assert header["kind"] == "snapshot" and header["totals"]["sessions"] == 60
    assert header["max_message_bytes"] == trace_protocol.MAX_MESSAGE_BYTES
    parts = []
    while not parts or not parts[-1]["last"]:
        parts.append(await recv_raw(ws))
    assert len(parts) > 3 and [p["part"] for p in parts] == list(range(len(parts)))
    rows = [r for p in parts for r in p["sessions"]]
    assert sorted(r["session_id"] for r in rows) == [f"s{i:02d}" for i in range(60)]
    assert all(r["chunk_count"] == 2 for r in rows)
    # shared_count is current: s00, the first to hold the common chunk, shares it too.
    shared = {r["session_id"]: r["shared_count"] for r in rows}
    assert all(shared[f"s{i:02d}"] == 1 for i in range(60))
    await ws.close()


async def test_an_oversized_record_is_cut_and_followed_by_a_fresh_snapshot(
    start_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace_protocol, "MAX_MESSAGE_BYTES", 3000)
    monkeypatch.setattr(trace_protocol, "MAX_DATA_BYTES", 400)
    d = await start_daemon()
    for i in range(30):
        await d.turn_end(f"s{i:02d}", ["sys", f"own{i}"])
    ws = await d.ws()
    state: dict[str, Any] = {}
    apply_record(state, await recv(ws))
    # list_sessions answers a big page: the record leaves its data out.
    await d.ok("list_sessions")
    rec = await recv_raw(ws)
    assert rec["type"] == "list_sessions" and rec["data"] is None
    assert rec["data_omitted_bytes"] > 400
    apply_record(state, rec)
    # A forced eviction of the shared chunk touches all 30 sessions: over the bound.
    await d.ok("chunk_evict", chunk_hashes=["sys"], force=True)
    cut = await recv_raw(ws)
    assert cut["resync"] is True and cut["type"] == "chunk_evict"
    assert cut["delta"] == {"sessions": {}, "refcounts": {}}
    assert cut["omitted"]["sessions"] == 30 and cut["omitted"]["refcounts"] == 1
    fresh = await recv(ws)
    assert fresh["kind"] == "snapshot" and fresh["seq"] == cut["seq"]
    assert all(r["chunk_count"] == 1 for r in fresh["sessions"].values())
    await d.turn_end("s00", ["x"])
    nxt = await recv(ws)
    assert nxt["seq"] == fresh["seq"] + 1  # no record twice, none lost
    await ws.close()


async def test_filtered_follower_sees_refcounts_changed_by_others(daemon: DaemonClient) -> None:
    d = daemon
    await d.turn_end("c", ["sys", "c1"])
    ws = await d.ws("?session=c")
    snap = await recv(ws)
    assert set(snap["sessions"]) == {"c"} and snap["refcounts"] == {"sys": 1, "c1": 1}
    await d.turn_end("other", ["sys", "o1"])  # raises sys, held by c
    await d.turn_end("unrelated", ["u1"])  # touches nothing of c's
    rec = await recv(ws)
    assert rec["session_id"] == "other" and rec["delta"]["refcounts"]["sys"] == 2
    await d.turn_end("c", ["c1", "c2"])  # c no longer holds sys
    rec = await recv(ws)
    assert rec["session_id"] == "c"
    await d.ok("session_close", session_id="other")  # sys only: c does not care now
    await d.turn_end("x", ["c2"])
    rec = await recv(ws)
    assert rec["session_id"] == "x" and rec["delta"]["refcounts"] == {"c2": 2}
    await ws.close()


async def test_history_back_fills_before_the_snapshot(daemon: DaemonClient) -> None:
    d = daemon
    for i in range(5):
        await d.turn_end("h", [f"x{i}"])
    ws = await d.ws("?history=3")
    got = [await recv(ws) for _ in range(4)]
    assert [r["kind"] for r in got] == ["event", "event", "event", "snapshot"]
    assert [r["seq"] for r in got[:3]] == [3, 4, 5] and got[3]["seq"] == 5
    await ws.close()


async def test_chunk_top_pages_by_refcount_and_prefix(daemon: DaemonClient) -> None:
    d = daemon
    await d.turn_end("a", ["sys", "aa1", "ab2"])
    await d.turn_end("b", ["sys", "aa1", "b1"])
    await d.turn_end("c", ["sys"])
    await d.ok("session_suspend", session_id="b")  # b holds nothing now
    top = await d.ok("chunk_top", limit=2)
    assert top["total"] == 3 and top["total_exact"] is True
    assert top["chunks"] == [{"hash": "sys", "refcount": 2}, {"hash": "aa1", "refcount": 1}]
    page2 = await d.ok("chunk_top", limit=2, offset=2)
    assert page2["chunks"] == [{"hash": "ab2", "refcount": 1}]
    found = await d.ok("chunk_top", prefix="a")
    assert [c["hash"] for c in found["chunks"]] == ["aa1", "ab2"] and found["total"] == 2
    status, body = await d.post({"type": "chunk_top", "limit": 501})
    assert body["ok"] is False and "'limit' must be an integer from 0 to 500" in body["error"]
    status, body = await d.post({"type": "chunk_top", "prefix": 7})
    assert body["ok"] is False and "'prefix'" in body["error"]


async def test_session_chunks_pages_the_map(daemon: DaemonClient) -> None:
    d = daemon
    await d.turn_end("a", ["sys", "a1", "a2", "a1"])
    await d.turn_end("b", ["sys"])
    await d.ok("session_fork", session_id="a")
    page = await d.ok("session_chunks", session_id="a", offset=1, limit=2)
    assert page["total"] == 4 and page["offset"] == 1 and page["state"] == "active"
    assert page["chunks"] == [
        {"pos": 1, "hash": "a1", "refcount": 2, "others": 0},  # map + own fork
        {"pos": 2, "hash": "a2", "refcount": 2, "others": 0},
    ]
    first = await d.ok("session_chunks", session_id="a", limit=1, forks=True)
    assert first["chunks"][0] == {"pos": 0, "hash": "sys", "refcount": 3, "others": 1}
    assert first["fork_holds"] == [["sys", "a1", "a2"]]
    status, body = await d.post({"type": "session_chunks", "session_id": "nobody"})
    assert body["ok"] is False and "not found" in body["error"]


async def test_a_closed_parents_forks_stay_readable(daemon: DaemonClient) -> None:
    d = daemon
    await d.turn_end("p", ["a", "b"])
    fid = (await d.ok("session_fork", session_id="p"))["fork_id"]
    await d.ok("session_close", session_id="p")
    page = await d.ok("session_chunks", session_id="p", forks=True)
    assert page["state"] == "closed" and page["total"] == 0 and page["chunks"] == []
    assert page["fork_holds"] == [["a", "b"]] and page["forks"][0]["fork_id"] == fid
    ws = await d.ws()
    snap = await recv(ws)
    assert snap["sessions"] == {}
    await ws.close()
    top = await d.ok("chunk_top")
    assert top["chunks"] == [{"hash": "a", "refcount": 1}, {"hash": "b", "refcount": 1}]
