"""A stalled trace subscriber is dropped (4008) without slowing events; shutdown closes (1001)."""

from __future__ import annotations

import asyncio

import aiohttp
from support.daemon_app import DaemonClient, StartDaemon
from support.daemon_proc import DaemonProcess
from support.trace_wire import RawWebSocket, parse_metrics, recv

# Big records fill socket buffers fast: each turn_end record carries the whole map twice.
BIG_MAP = 400


REPLY_GUARD_S = 120.0  # a hang guard, not a bound


async def big_turn_end(d: DaemonClient, sid: str, i: int) -> None:
    """A turn_end with a large map (large trace records), answered within the hang guard:
    one that waited on a subscriber that never reads would never be answered."""
    hashes = [f"{sid}-{i % 2}-{k:04d}-{'x' * 40}" for k in range(BIG_MAP)]
    await asyncio.wait_for(d.turn_end(sid, hashes), REPLY_GUARD_S)


async def test_stalled_subscriber_is_dropped_and_events_never_wait_for_it(
    start_daemon: StartDaemon,
) -> None:
    d = await start_daemon(trace_queue=8)
    host, port = d.client.host, d.client.port
    # One healthy subscriber reading along.
    healthy = await d.ws()
    await recv(healthy)
    got: list[int] = []

    async def read_healthy() -> None:
        while True:
            msg = await healthy.receive()
            if msg.type != aiohttp.WSMsgType.TEXT:
                return
            got.append(int(msg.json()["seq"]))

    reader = asyncio.create_task(read_healthy())
    for i in range(20):
        await big_turn_end(d, "s", i)

    # A client that completes the handshake and then never reads a byte.
    stalled = await asyncio.to_thread(RawWebSocket, host, port, "/trace?protocol=2")
    for _ in range(12000):  # hang guard
        if len(d.daemon.trace.subscribers) == 2:
            break
        await asyncio.sleep(0.01)
    assert len(d.daemon.trace.subscribers) == 2
    # Every event is answered while the stalled client backs up (none waits for it: the
    # client never reads, so one that did would hang); latency itself is the benchmarks'.
    for i in range(400):  # bounded: the drop comes after a few MB at most
        await big_turn_end(d, "s", i)
        if d.daemon.trace.dropped_total:
            break
    assert d.daemon.trace.dropped_total == 1, "stalled subscriber never dropped"
    for i in range(10):  # and events after the drop
        await big_turn_end(d, "s", i)
    assert len(d.daemon.trace.subscribers) == 1
    metrics = parse_metrics(await d.metrics_text())
    assert metrics[("ramakv_trace_dropped_subscribers_total", ())] == 1
    assert metrics[("ramakv_trace_subscribers", ())] == 1

    # Once it reads again it finds what was sent before the drop, then the close frame.
    messages, code, reason = await asyncio.to_thread(stalled.read_until_close)
    stalled.close()
    assert code == 4008
    assert "too slow" in reason and "since" in reason, reason
    assert messages[0]["kind"] == "snapshot" and messages[1]["kind"] == "snapshot_sessions"
    seqs = [m["seq"] for m in messages[1:]]  # a snapshot's parts carry its seq
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # no gap in what it did get

    # The healthy subscriber was never dropped and saw every event, gap-free.
    await d.ok("health")
    for _ in range(12000):  # a hang guard, not a time limit: a loaded CI machine is slow
        if got and got[-1] == d.daemon.trace.seq:
            break
        await asyncio.sleep(0.01)
    assert got == list(range(got[0], d.daemon.trace.seq + 1))
    await healthy.close()
    await asyncio.wait_for(reader, 120)


async def test_burst_into_tiny_queue_drops_only_the_laggard(start_daemon: StartDaemon) -> None:
    """A queue of 2 and a synchronous burst of publishes: the hub never blocks or grows."""
    d = await start_daemon(trace_queue=2)
    ws = await d.ws()
    await recv(ws)
    hub = d.daemon.trace
    sub = next(iter(hub.subscribers))
    for i in range(1000):  # no await: the sender task cannot drain in between
        hub.publish({"kind": "event", "type": "synthetic", "session_id": None, "n": i})
    assert sub.queue.qsize() <= 2 and sub not in hub.subscribers
    msg = await ws.receive(timeout=120)
    while msg.type == aiohttp.WSMsgType.TEXT:  # whatever was in flight before the drop
        msg = await ws.receive(timeout=120)
    assert msg.type == aiohttp.WSMsgType.CLOSE
    assert msg.data == 4008 and "too slow" in msg.extra
    # A new subscriber resumes from its last seq with a snapshot or the replay.
    ws2 = await d.ws("?since=1")
    first = await recv(ws2)
    assert first["seq"] == 2  # the ring still holds everything after seq 1
    await ws2.close()


async def until_closed(ws: aiohttp.ClientWebSocketResponse) -> aiohttp.WSMessage:
    """Skip text messages (a replay) until the first non-text one."""
    for _ in range(1000):
        msg = await ws.receive(timeout=120)
        if msg.type != aiohttp.WSMsgType.TEXT:
            return msg
    raise AssertionError("never closed")


async def test_shutdown_closes_subscribers_with_1001(daemon_proc: DaemonProcess) -> None:
    d = daemon_proc
    assert d.event("turn_end", session_id="s", kv_transfer_params={"chunk_hashes": ["h"]})["ok"]
    async with aiohttp.ClientSession() as http:
        clients = [
            await http.ws_connect(f"{d.url}/trace?protocol=2"),
            await http.ws_connect(f"{d.url}/trace?protocol=2&session=s"),
            await http.ws_connect(f"{d.url}/trace?protocol=2&since=0"),
        ]
        firsts = [await recv(ws) for ws in clients]
        assert [m["kind"] for m in firsts] == ["snapshot", "snapshot", "event"]
        stopper = asyncio.create_task(asyncio.to_thread(d.stop))
        closes = [await until_closed(ws) for ws in clients]
        rc = await stopper
    for msg in closes:
        assert msg.type == aiohttp.WSMsgType.CLOSE, msg
        assert msg.data == aiohttp.WSCloseCode.GOING_AWAY
        assert msg.extra == "daemon shutting down"
    # 1001 with the reason is the close-subscribers step's doing: handlers still open at the
    # end of aiohttp's 5 s shutdown timeout are cancelled and close with a plain 1000.
    assert rc == 0, d.log()[-2000:]
