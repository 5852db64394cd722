"""Console fixtures: a real daemon process, a scripted fake link, and a wait helper."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = str(Path(__file__).resolve().parents[1])
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

from support.daemon_proc import daemon_proc, daemon_proc_factory  # noqa: E402,F401

REPO = Path(__file__).resolve().parents[2]
FIXED_NOW = 1_700_000_000.0

CATALOGUE = {
    "health": {"description": "Health check", "required": [], "optional": []},
    "turn_end": {"description": "Post-inference safe eviction + update", "required":
                 ["session_id", "kv_transfer_params"], "optional": ["debug_context"]},
    "session_suspend": {"description": "Suspend session", "required": ["session_id"],
                        "optional": []},
    "chunk_evict": {"description": "Evict chunks by hand", "required": ["chunk_hashes"],
                    "optional": ["dry_run", "force"]},
}


def fixed_snapshot() -> dict[str, Any]:
    """Deterministic state for snapshots: shared system prompt, a fork, a suspended one."""
    def s(sid: str, state: str, turns: int, hashes: list[str], holds: list[list[str]],
          ago: float) -> dict[str, Any]:
        return {"session_id": sid, "state": state, "turn_count": turns,
                "chunk_hashes": hashes, "fork_holds": holds, "last_event_ts": FIXED_NOW - ago}

    sessions = {
        "agent-alpha": s("agent-alpha", "active", 7, ["sys-0", "sys-1", "a-2", "a-3"],
                         [["sys-0", "sys-1", "a-2"]], 12),
        "agent-beta": s("agent-beta", "active", 3, ["sys-0", "sys-1", "b-2"], [], 95),
        "agent-gamma": s("agent-gamma", "suspended", 12, ["sys-0", "g-1"], [], 7300),
    }
    fork = {"fork_id": 1, "session_id": "agent-alpha", "created_ts": FIXED_NOW - 300,
            "chunk_count": 3}
    sessions["agent-alpha"]["forks"] = [fork]
    refcounts = {"sys-0": 3, "sys-1": 3, "a-2": 2, "a-3": 1, "b-2": 1}
    return {"kind": "snapshot", "seq": 42, "ts": FIXED_NOW, "sessions": sessions,
            "refcounts": refcounts,
            "forks": {"1": {**fork, "chunk_hashes": ["sys-0", "sys-1", "a-2"]}}}


class FakeLink:
    """A DaemonLink with a fixed trace and canned answers (no network)."""

    url = "http://127.0.0.1:6998"

    def __init__(self, records: list[dict[str, Any]] | None = None) -> None:
        self.records = records if records is not None else [fixed_snapshot()]
        self.sent: list[dict[str, Any]] = []

    async def send(self, event: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(event)
        if event.get("type") == "list_events":
            admin = {"chunk_evict"}
            return {"ok": True, "type": "list_events", "data": {
                "events": {k: v for k, v in CATALOGUE.items() if k not in admin},
                "admin_events": {k: v for k, v in CATALOGUE.items() if k in admin}}}
        return {"ok": True, "type": event.get("type"), "data": {}}

    async def trace(self) -> AsyncIterator[dict[str, Any]]:
        yield {"kind": "_status", "connected": True, "detail": "connected"}
        for rec in self.records:
            yield rec
        await asyncio.Event().wait()

    async def aclose(self) -> None:
        return None


@pytest.fixture
def fake_app(tmp_path: Path) -> Callable[..., Any]:
    """Build a ConsoleApp on a FakeLink with a fixed clock and temp config paths."""
    from ramakv_console.app import ConsoleApp

    def make(**kwargs: Any) -> ConsoleApp:
        link = kwargs.pop("link", None) or FakeLink()
        kwargs.setdefault("daemon_config", tmp_path / "daemon.toml")
        kwargs.setdefault("sdk_config", tmp_path / "sdk.toml")
        return ConsoleApp(link.url, link, clock=lambda: FIXED_NOW, **kwargs)

    return make


@pytest.fixture
def real_app(tmp_path: Path, request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Build a ConsoleApp on the real daemon process (the ``daemon_proc`` fixture)."""
    from ramakv_console.app import ConsoleApp

    proc = request.getfixturevalue("daemon_proc")

    def make(**kwargs: Any) -> ConsoleApp:
        kwargs.setdefault("daemon_config", tmp_path / "daemon.toml")
        kwargs.setdefault("sdk_config", tmp_path / "sdk.toml")
        return ConsoleApp(proc.url, **kwargs)

    return make


async def until(pilot: Any, cond: Callable[[], bool], timeout: float = 8.0,
                what: str = "condition") -> None:
    """Let the app run until ``cond()`` holds; fail with ``what`` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)
