"""The console suites' scripted daemon: a fixed trace, canned answers, a fake link, a waiter."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

FIXED_NOW = 1_700_000_000.0

CATALOGUE = {
    "health": {"description": "Health check", "required": [], "optional": []},
    "turn_end": {
        "description": "Post-inference safe eviction + update",
        "required": ["session_id", "kv_transfer_params"],
        "optional": ["debug_context"],
    },
    "session_suspend": {
        "description": "Suspend session",
        "required": ["session_id"],
        "optional": [],
    },
    "chunk_evict": {
        "description": "Evict chunks by hand",
        "required": ["chunk_hashes"],
        "optional": ["dry_run", "force"],
    },
}


MAPS = {
    "agent-alpha": ["sys-0", "sys-1", "a-2", "a-3"],
    "agent-beta": ["sys-0", "sys-1", "b-2"],
    "agent-gamma": ["sys-0", "g-1"],
}
REFCOUNTS = {"sys-0": 3, "sys-1": 3, "a-2": 2, "a-3": 1, "b-2": 1}


def fixed_snapshot() -> list[dict[str, Any]]:
    """Deterministic state (protocol 2: a header and one part): a shared system prompt,
    a fork, a suspended session."""

    def s(sid: str, state: str, turns: int, shared: int, holds: int, ago: float) -> dict[str, Any]:
        return {
            "session_id": sid,
            "state": state,
            "turn_count": turns,
            "chunk_count": len(MAPS[sid]),
            "shared_count": shared,
            "fork_holds": holds,
            "last_event_ts": FIXED_NOW - ago,
        }

    fork = {
        "fork_id": 1,
        "session_id": "agent-alpha",
        "created_ts": FIXED_NOW - 300,
        "chunk_count": 3,
    }
    sessions = [
        {**s("agent-alpha", "active", 7, 2, 1, 12), "forks": [fork]},
        s("agent-beta", "active", 3, 2, 0, 95),
        s("agent-gamma", "suspended", 12, 1, 0, 7300),
    ]
    return [
        {
            "kind": "snapshot",
            "protocol": 2,
            "seq": 42,
            "epoch": "e",
            "ts": FIXED_NOW,
            "totals": {"sessions": 3, "chunks": 5, "references": 10},
        },
        {
            "kind": "snapshot_sessions",
            "seq": 42,
            "epoch": "e",
            "part": 0,
            "last": True,
            "refcounts": {},
            "sessions": sessions,
        },
    ]


def canned_answer(event: dict[str, Any]) -> dict[str, Any]:
    """What the fake daemon answers for the console's own reads."""
    kind = event.get("type")
    if kind == "list_events":
        admin = {"chunk_evict"}
        return {
            "events": {k: v for k, v in CATALOGUE.items() if k not in admin},
            "admin_events": {k: v for k, v in CATALOGUE.items() if k in admin},
        }
    if kind == "session_chunks":
        hashes = MAPS.get(str(event.get("session_id")), [])
        own = {"agent-alpha": {"sys-0": 2, "sys-1": 2, "a-2": 2}}.get(
            str(event.get("session_id")), {}
        )
        return {
            "session_id": event.get("session_id"),
            "state": "active",
            "turn_count": 1,
            "total": len(hashes),
            "offset": 0,
            "chunks": [
                {
                    "pos": i,
                    "hash": h,
                    "refcount": REFCOUNTS.get(h, 0),
                    "others": max(REFCOUNTS.get(h, 0) - own.get(h, 1), 0),
                }
                for i, h in enumerate(hashes)
            ],
        }
    if kind == "chunk_top":
        prefix = str(event.get("prefix") or "")
        rows = sorted(
            ((n, h) for h, n in REFCOUNTS.items() if h.startswith(prefix)),
            key=lambda r: (-r[0], r[1]),
        )
        return {
            "total": len(rows),
            "total_exact": True,
            "offset": 0,
            "prefix": prefix,
            "chunks": [{"hash": h, "refcount": n} for n, h in rows],
        }
    return {}


class FakeLink:
    """A DaemonLink with a fixed trace and canned answers (no network)."""

    url = "http://127.0.0.1:6998"

    def __init__(self, records: list[dict[str, Any]] | None = None) -> None:
        self.records = records if records is not None else fixed_snapshot()
        self.sent: list[dict[str, Any]] = []

    async def send(self, event: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(event)
        return {"ok": True, "type": event.get("type"), "data": canned_answer(event)}

    async def trace(self) -> AsyncIterator[dict[str, Any]]:
        yield {"kind": "_status", "connected": True, "detail": "connected"}
        for rec in self.records:
            yield rec
        await asyncio.Event().wait()

    async def aclose(self) -> None:
        return None


async def until(
    pilot: Any, cond: Callable[[], bool], timeout: float = 120.0, what: str = "condition"
) -> None:
    """Let the app run until ``cond()`` holds; fail with ``what`` after ``timeout`` seconds.

    ``timeout`` is only a hang guard: a real daemon process and the app's start on a loaded
    2-core box took longer than the old 8 s, which failed tests that were only slow."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)
