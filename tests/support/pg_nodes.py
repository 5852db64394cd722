"""The scale-out suites' helpers: daemons sharing one PostgreSQL database, and a kill -9
burst against one of them with what the database kept of it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ramakv_daemon.adapters.postgres_store import PostgresSessionStore
from ramakv_daemon.core.manager import recompute_refcounts
from ramakv_daemon.core.session import Session
from support import burst, burst_client
from support.daemon_proc import DaemonProcess, trace_snapshot

SESSIONS = 16
TURNS = 400  # far more than the burst gets through before the kill


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def sessions_of(d: DaemonProcess) -> set[str]:
    return {r["session_id"] for r in d.event("list_sessions")["data"]["sessions"]}


async def check_refcounts_match_owned(d: DaemonProcess) -> None:
    snap = await trace_snapshot(d.url)
    owned = [
        Session(s["session_id"], tuple(s["chunk_hashes"]), suspended=s["state"] == "suspended")
        for s in snap["sessions"].values()
    ]
    assert snap["refcounts"] == recompute_refcounts(owned)


def two_nodes(factory: Callable[..., DaemonProcess], url: str) -> tuple[DaemonProcess, ...]:
    return tuple(factory(config={"session_store_url": url, "node_id": node}) for node in ("a", "b"))


def run_burst_until(
    d: DaemonProcess, acks_path: Path, acks: int, then: Callable[[], None]
) -> dict[str, int]:
    """The burst client (SESSIONS x TURNS) against ``d``; ``then`` after ``acks``."""
    return burst.run_burst_until(d.url, acks_path, acks, then, SESSIONS, TURNS)


async def stored_sessions(url: str, node: str) -> dict:
    store = PostgresSessionStore(url, node)
    await store.open()
    try:
        return {s.session_id: s for s in await store.load_all()}
    finally:
        await store.close()


def check_acked_are_stored(acked: dict[str, int], stored: dict) -> None:
    for sid, last_ack in acked.items():
        assert sid in stored, f"acknowledged session {sid} lost"
        s = stored[sid]
        # At most one unacknowledged turn per session was in flight at the kill.
        assert s.turn_count in (last_ack, last_ack + 1), (sid, last_ack, s.turn_count)
        assert list(s.chunk_hashes) == burst_client.expected_map(sid, s.turn_count)
