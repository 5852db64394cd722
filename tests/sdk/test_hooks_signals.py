"""SessionSignals (what both framework hooks send) drives the proxy's lifecycle machine: a
second suspend of a suspended session sends nothing, a restore of one it did not suspend
sends nothing, a close is declared (never inferred). A recording client, no daemon."""

from __future__ import annotations

from typing import Any

from ramakv_sdk.hooks.signals import SessionSignals
from ramakv_sdk.lifecycle.clock import ManualClock


class Recording:
    """A daemon client that answers every event as a daemon would, and keeps them."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    async def raw(self, event: dict[str, Any]) -> dict[str, Any]:
        self.events.append(event)
        data = {"suspended": True, "closed": True, "prefetch_count": 0}
        return {"ok": True, "data": data}


async def test_signals_follow_the_machine() -> None:
    client = Recording()
    signals = SessionSignals(client, clock=ManualClock())  # type: ignore[arg-type]
    assert await signals.restore("t") is None  # never suspended: nothing sent
    assert await signals.suspend("t") and await signals.suspend("t")  # the second: no event
    assert signals.suspended == {"t"}
    landing = await signals.restore("t")
    assert landing is not None and landing.outcome == "unknown"
    assert signals.suspended == set()
    assert await signals.close("t")
    assert [(e["type"], e["reason"]) for e in client.events] == [
        ("session_suspend", "slow_tool"),
        ("snapshot_restore", "tool_done"),
        ("session_close", "run_end"),
    ]
    assert not any(e.get("inferred") for e in client.events)  # the host declares these


async def test_a_refused_suspend_leaves_nothing_to_restore() -> None:
    class Refusing(Recording):
        async def raw(self, event: dict[str, Any]) -> dict[str, Any]:
            self.events.append(event)
            return {"ok": False, "error": "unknown session"}

    client = Refusing()
    signals = SessionSignals(client, clock=ManualClock())  # type: ignore[arg-type]
    assert not await signals.suspend("gone")
    assert signals.suspended == set() and await signals.restore("gone") is None
    assert len(client.events) == 1
