"""Release semantics through the daemon (issue 31): the ``inferred`` flag, COLD delivered
as an order hint to a backend that has one and as a demote to one that has not, the
retention sweep on an injected clock (committed, traced, counted, delivered as deletes),
and the rule kept across a restart."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.daemon_app import DaemonClient, RecordingBackend

T0 = 1_000_000.0


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def records(d: DaemonClient, since: int) -> list[dict[str, Any]]:
    return [json.loads(r) for r in d.daemon.trace.replay(since) or []]


@pytest.mark.parametrize("event", ["session_close", "session_suspend"])
@pytest.mark.parametrize("bad", ["yes", 1, 0, [], {}])
async def test_a_non_bool_inferred_is_refused_and_changes_nothing(
    daemon: DaemonClient, event: str, bad: object
) -> None:
    await daemon.turn_end("s", ["a"])
    before = daemon.state()
    error = await daemon.err(event, session_id="s", inferred=bad)
    assert "'inferred' must be a boolean" in error
    assert daemon.state() == before


@pytest.mark.parametrize("orders", [True, False])
async def test_cold_goes_out_as_an_order_hint_or_not_at_all_without_one(
    start_daemon: Any, orders: bool
) -> None:
    backend = RecordingBackend(orders=orders)
    d = await start_daemon(backend=backend)
    await d.turn_end("s", ["a", "b"])
    seq = d.daemon.trace.seq
    data = await d.ok("session_close", session_id="s", inferred=True)
    assert data == {"evicted_count": 2, "closed": True}
    await d.settle()
    assert backend.of("delete") == []
    # Without the route nothing is sent (a demote would cost a disk read whenever the
    # guess was wrong): the cache's own LRU orders them; nothing is left owed either.
    assert sorted(backend.of("cold")) == (["a", "b"] if orders else [])
    assert backend.of("demote") == []
    assert d.daemon.default.dispatcher.backlog == 0
    metrics = await (await d.client.get("/metrics")).text()
    left = 'ramakv_backend_chunks_total{op="cold_left"} 2.0'
    assert (left in metrics) is not orders
    close = [r for r in records(d, seq) if r.get("type") == "session_close"]
    assert sorted(close[0]["cold"]) == ["a", "b"] and close[0]["evict"] == []


async def test_the_retention_sweep_deletes_dead_chunks_after_the_window(
    start_daemon: Any,
) -> None:
    clock, backend = Clock(), RecordingBackend(orders=True)
    d = await start_daemon(backend=backend, clock=clock, retain_unreferenced_s=600.0)
    await d.turn_end("a", ["sys", "a1"])
    await d.turn_end("b", ["sys", "b1"])
    await d.ok("session_close", session_id="a", inferred=True)  # a guess: a1 cold
    await d.ok("session_close", session_id="b")  # declared: b1 deleted, sys shared: cold
    await d.settle()
    assert backend.of("delete") == ["b1"]
    assert sorted(backend.of("cold")) == ["a1", "sys"]
    clock.now = T0 + 599
    assert await d.daemon.retention.sweep() == 0
    seq = d.daemon.trace.seq
    clock.now = T0 + 600
    assert await d.daemon.retention.sweep() == 2
    await d.settle()
    assert sorted(backend.of("delete")) == ["a1", "b1", "sys"]
    swept = [r for r in records(d, seq) if r.get("type") == "retention_sweep"]
    assert len(swept) == 1 and sorted(swept[0]["evict"]) == ["a1", "sys"]
    metrics = await (await d.client.get("/metrics")).text()
    assert "ramakv_retention_deleted_chunks_total 2.0" in metrics
    assert await d.daemon.retention.sweep() == 0  # once


async def test_a_restart_keeps_a_shared_prefix_for_the_window(
    start_daemon: Any, make_config: Any
) -> None:
    clock = Clock()
    # No idle policy: it would suspend both sessions at the restart (an hour idle).
    config = make_config(retain_unreferenced_s=600.0, idle_suspend_s=0.0, idle_close_s=0.0)
    d = await start_daemon(config, clock=clock)
    await d.turn_end("a", ["sys", "a1"])
    await d.turn_end("b", ["sys", "b1"])
    await d.close()

    clock.now = T0 + 10_000  # the restart: long after the prefix was last shared
    backend = RecordingBackend(orders=True)
    d2 = await start_daemon(config, backend=backend, clock=clock)
    await d2.ok("session_close", session_id="a")
    await d2.ok("session_close", session_id="b")
    await d2.settle()
    assert sorted(backend.of("delete")) == ["a1", "b1"] and backend.of("cold") == ["sys"]
    clock.now += 600
    assert await d2.daemon.retention.sweep() == 1
    await d2.settle()
    assert backend.of("delete")[-1:] == ["sys"]
