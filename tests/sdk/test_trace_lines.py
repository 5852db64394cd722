"""`ramakv trace`'s lines: one per kind, picked by ramakv_protocol's dispatch."""

from __future__ import annotations

from ramakv_sdk.cli import trace_line


def test_one_line_per_kind() -> None:
    assert trace_line(
        {"kind": "snapshot", "seq": 3, "totals": {"sessions": 2, "chunks": 5, "references": 6}}
    ) == ("#3 snapshot: 2 sessions, 5 chunks, 6 references")
    assert trace_line(
        {"kind": "snapshot_sessions", "seq": 3, "part": 0, "sessions": [{}], "last": True}
    ) == ("#3 snapshot part 0: 1 sessions (last)")
    assert trace_line({"kind": "disconnected", "error": "slow", "reason": "too slow"}) == (
        "-- fell behind: too slow; retrying with backoff"
    )
    assert trace_line({"kind": "reconnected", "since": 7}) == "-- reconnected, resuming after #7"
    event = trace_line(
        {
            "kind": "event",
            "seq": 8,
            "ts": 0,
            "type": "turn_end",
            "session_id": "s",
            "ok": True,
            "data": {"evicted_count": 0},
            "evict": ["a"],
        }
    )
    assert event.startswith("#8 ") and event.endswith("turn_end s ok evicted_count=0 evict=1")
    failed = trace_line(
        {"kind": "event", "seq": 9, "ts": 0, "type": "x", "ok": False, "error": "no"}
    )
    assert failed.endswith("x - FAILED: no")
    backend = trace_line(
        {
            "kind": "backend",
            "seq": 10,
            "ts": 0,
            "op": "evict_delete",
            "count": 2,
            "ok": False,
            "status": 503,
            "detail": "down",
            "backlog": 2,
        }
    )
    assert backend.endswith("backend evict_delete of 2 chunks FAILED: status=503 down (backlog 2)")
    budget = trace_line(
        {
            "kind": "budget",
            "seq": 11,
            "ts": 0,
            "namespace": "",
            "victims": ["a"],
            "demote": ["x", "y"],
            "usage_before": 5,
            "usage_after": 3,
            "budget": 4,
        }
    )
    assert budget.endswith("budget: demoted 1 sessions, 2 chunks (5 -> 3 of 4)")
