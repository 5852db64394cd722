"""What one request and the trace ring can hold is bounded in bytes."""

from __future__ import annotations

from typing import Any

from ramakv_daemon.trace.hub import TraceHub


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
    trace = d.daemon.trace
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


async def test_sliced_admin_reads_answer_one_consistent_moment(
    start_daemon: Any, make_config: Any
) -> None:
    """chunk_info and list_sessions run in slices while writes go on; each answer is the
    state of one moment (refcount == holders found, total == rows), never a mix."""
    import asyncio

    d = await start_daemon()
    m = d.daemon.default.manager
    from ramakv_daemon.core.session import Session

    m.load([Session(f"s{i:05d}", ("shared", f"own{i}")) for i in range(6000)])

    async def churn() -> None:
        for i in range(300):
            sid = f"s{(i * 17) % 6000:05d}"
            await d.turn_end(sid, [f"own{i}"] if i % 2 else ["shared", f"own{i}"])
            await d.turn_end(f"new{i}", ["shared"])

    async def read() -> list[tuple[int, int, int, int]]:
        seen = []
        for _ in range(15):
            info = (await d.ok("chunk_info", chunk_hashes=["shared"]))["chunks"]["shared"]
            page = await d.ok("list_sessions", limit=10000)
            seen.append(
                (info["refcount"], len(info["holders"]), page["total"], len(page["sessions"]))
            )
        return seen

    _, seen = await asyncio.gather(churn(), read())
    for refcount, holders, total, rows in seen:
        assert refcount == holders
        assert total == rows or rows == 10000
    assert any(s != seen[0] for s in seen)  # the reads did run while the state moved
