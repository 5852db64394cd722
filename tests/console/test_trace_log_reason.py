"""The trace log names who decided a lifecycle event (notes.reason, e.g. ramakv-proxy's)."""

from ramakv_console.widgets.trace_log import describe


def test_reason_is_shown() -> None:
    rec = {
        "ok": True,
        "type": "session_suspend",
        "data": {"evicted_count": 2, "suspended": True},
        "demote": ["a", "b"],
        "notes": {"reason": "tool_pause"},
    }
    assert describe(rec) == "evicted_count=2 suspended=True  demote=2  reason=tool_pause"
    assert "reason" not in describe({**rec, "notes": {}})
