"""What the daemon sends is what ramakv_protocol says: every trace message it publishes in
a run of every event kind, and every reply's ``data``, checked field by field."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import aiohttp
from support.daemon_app import DaemonClient

from ramakv_daemon.ports import Backend, BackendResult, ChunkLocations, EvictMode
from ramakv_protocol.conformance import problems, reply_problems

TIMEOUT = 60.0


class Clock:
    """A wall clock the test moves by hand (fork expiry)."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class RefusingBackend(Backend):
    """A backend that answers every eviction 503 (kept queued and retried; the trace
    says so with a ``backend`` record)."""

    name = "refusing"

    async def prefetch(self, chunk_hashes: Sequence[str], tag: str) -> BackendResult:
        return BackendResult(ok=True, status=200)

    async def evict(self, chunk_hashes: Sequence[str], mode: EvictMode) -> BackendResult:
        return BackendResult(ok=False, status=503, detail="eviction refused")

    async def query(self, chunk_hashes: Sequence[str]) -> tuple[BackendResult, ChunkLocations]:
        return BackendResult(ok=True, status=200), ChunkLocations()

    async def close(self) -> None:
        return None


async def read_until(
    ws: aiohttp.ClientWebSocketResponse, done: Any, seen: list[dict[str, Any]]
) -> None:
    """Append messages to ``seen`` until ``done(seen)``."""
    while not done(seen):
        msg = await ws.receive(timeout=TIMEOUT)
        assert msg.type == aiohttp.WSMsgType.TEXT, (msg.type, msg.extra)
        seen.append(json.loads(msg.data))


async def test_every_message_and_reply_conforms(start_daemon: Any, make_config: Any) -> None:
    clock = Clock()
    d: DaemonClient = await start_daemon(
        make_config(fork_hold_ttl_s=60.0), backend=RefusingBackend(), clock=clock
    )
    await d.turn_end("pre", ["sys", "p1"])
    ws = await d.client.ws_connect("/trace?protocol=2")
    replies: dict[str, Any] = {}

    async def ok(type_: str, **fields: Any) -> None:
        replies[type_] = await d.ok(type_, **fields)

    await ok("turn_end", session_id="a", kv_transfer_params={"chunk_hashes": ["sys", "a1"]})
    await ok("session_fork", session_id="a")
    fork_of_a = replies["session_fork"]["fork_id"]
    await ok("turn_start", session_id="a")
    await ok("snapshot_restore", session_id="b", source_session_id="a")
    await ok("session_map", session_id="a")
    await ok("session_fork", session_id="pre")
    await ok("session_suspend", session_id="pre")
    await ok("session_fork_end", session_id="a", fork_id=fork_of_a)
    await ok("list_sessions")
    await ok("chunk_top", limit=5)
    await ok("session_chunks", session_id="a", forks=True)
    await ok("chunk_info", chunk_hashes=["sys", "nope"])
    await ok("backend_query", chunk_hashes=["sys"])
    await ok("health")
    await ok("list_events")
    await ok("list_namespaces")
    await ok("chunk_evict", chunk_hashes=["a1"], force=True)  # refused: a backend record
    await ok("session_close", session_id="b")
    await d.err("no_such_event")
    clock.now += 61
    assert await d.daemon.fork_expiry.expire_forks() == 1  # pre's fork: a fork_expire record

    seen: list[dict[str, Any]] = []
    await read_until(
        ws,
        lambda s: (
            any(m["kind"] == "backend" for m in s)
            and any(m["kind"] == "event" and m["type"] == "fork_expire" for m in s)
        ),
        seen,
    )
    kinds = {m["kind"] for m in seen}
    assert {"snapshot", "snapshot_sessions", "event", "backend"} <= kinds
    for msg in seen:
        assert problems(msg) == [], msg
    events = [m for m in seen if m["kind"] == "event"]
    assert {"fork_expire", "no_such_event", *replies} <= {m["type"] for m in events}
    for rec in events:
        if rec["ok"]:
            assert reply_problems(rec["type"], rec["data"]) == [], rec
    for type_, data in replies.items():
        assert reply_problems(type_, data) == [], (type_, data)
    await ws.close()


def test_the_checker_names_what_is_wrong() -> None:
    good = {
        "kind": "reconnected",
        "since": None,
        "attempts": 1,
    }
    assert problems(good) == []
    assert problems({**good, "attempts": "1"}) == ["attempts: expected <class 'int'>, got '1'"]
    assert problems({**good, "extra": 1}) == ["record: 'extra' is not a field of ReconnectedMarker"]
    assert problems({"kind": "reconnected"}) == [
        "record: missing 'attempts'",
        "record: missing 'since'",
    ]
    assert problems({"kind": "nope"}) == ["kind: unknown kind 'nope'"]
    assert reply_problems("turn_start", {"prefetch_sent": 1, "prefetch_count": 0}) == [
        "data.prefetch_sent: expected <class 'bool'>, got 1"
    ]
    assert reply_problems("some_admin_read", {"anything": 1}) == []


def test_evict_window_records_conform() -> None:
    """The evict window's notices (published only with an Ascend-side window open)."""
    from ramakv_daemon.delivery.window_report import window_record

    for outcome in ("kept", "missed", "exposed", "repeated"):
        for key in ("", "kvp-0123"):
            rec = window_record(key, outcome, ["a", "b"])
            assert rec is not None
            assert problems({**rec, "seq": 1, "epoch": "0" * 16}) == [], rec
    assert window_record("", "measured", ["a"]) is None
