"""What one request and the trace ring can hold is bounded in bytes."""

from __future__ import annotations

from typing import Any

from ramakv_daemon.trace import TraceHub


def test_ring_is_bounded_in_bytes_oldest_first() -> None:
    hub = TraceHub(buffer_size=10_000, buffer_bytes=50_000)
    for i in range(500):
        hub.publish({"kind": "event", "i": i, "pad": "x" * 1000})
    assert hub.ring_bytes <= 50_000
    assert hub.ring_bytes == sum(len(text) for _, _, text in hub.ring)
    assert hub.ring[-1][0] == 500 and len(hub.ring) < 50
    assert hub.replay(0) is None  # the oldest are gone: a client gets a fresh snapshot
    assert hub.replay(hub.ring[0][0] - 1) is not None


async def test_rejected_requests_do_not_bloat_the_ring(start_daemon: Any, make_config: Any) -> None:
    d = await start_daemon(make_config(max_body_bytes=4 * 1024 * 1024))
    trace = d.service.trace
    before = trace.ring_bytes
    huge = "s" * (2 * 1024 * 1024)
    for kind in ("turn_end", "x" * (1024 * 1024)):
        for _ in range(10):
            status, body = await d.post({"type": kind, "session_id": huge})
            assert body["ok"] is False, body
    # 20 rejected 2-3 MiB bodies keep a few hundred bytes each in the ring.
    assert trace.ring_bytes - before < 20 * 1024
    status, body = await d.post(b"{" + b" " * (5 * 1024 * 1024) + b"}")
    assert status == 413 and "larger than" in body["error"]
