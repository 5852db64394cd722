"""Backend down, slow or erroring: events stay fast, evictions wait in a durable outbox."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.daemon_app import DaemonClient
from support.daemon_proc import DaemonProcess, free_port
from support.lmcache_server import FakeLMCacheServer
from support.reliability import (
    FakeLMCacheProcess,
    db_model,
    db_outbox,
    metric,
    wait_for,
)

from ramakv_daemon.config import Config

BACKEND_TIMEOUT = 0.3
# "slow": every call held until healed, and a daemon timeout longer than any test: an event
# whose reply waited for the backend would hang (and fail the test's guard) instead of
# being measured against a wall-clock bound.
HELD_TIMEOUT = 3600.0
REPLY_GUARD_S = 120.0  # a hang guard, not a bound
FAULTS = ("refused", "slow", "500", "503", "malformed")


async def lm_daemon(
    start_daemon: Callable[..., Any],
    make_config: Callable[..., Config],
    url: str,
    timeout: float = BACKEND_TIMEOUT,
) -> DaemonClient:
    """An in-process daemon on the LMCache backend at ``url``, short timeout and backoff."""
    cfg = make_config(noop_backend=False, lmcache_url=url, backend_timeout_s=timeout)
    d = await start_daemon(cfg)
    d.daemon.default.dispatcher.delivery.base_backoff_s = 0.05
    return d


async def inject(fake: FakeLMCacheServer, fault: str) -> None:
    """Make the fake fail every call in ``fault`` until healed."""
    if fault == "refused":
        await fake.refuse()
    elif fault == "slow":
        await fake.set_failure("slow", delay=math.inf)  # held until healed
    else:
        await fake.set_failure(fault)


async def eventually(pred: Callable[[], bool], timeout: float = 120.0) -> None:
    """Await until ``pred()`` holds; ``timeout`` is a hang guard, not a bound."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def metric_value(d: DaemonClient, name: str, **labels: str) -> float:
    """One sample (or the sum over matching samples) from GET /metrics."""
    resp = await d.client.get("/metrics")
    text = await resp.text()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + ("{" if labels else "")) and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def answered(d: DaemonClient, type_: str, **fields: Any) -> dict[str, Any]:
    """A successful event, answered while the backend fails (or holds every call)."""
    return await asyncio.wait_for(d.ok(type_, **fields), REPLY_GUARD_S)


def evicted_since(fake: FakeLMCacheServer, index: int) -> list[str]:
    """Hashes in evict calls the fake received from request number ``index`` on."""
    return [
        h
        for r in fake.requests[index:]
        if r.path == "/memory/evict"
        for h in (r.body or {}).get("chunk_hashes", [])
    ]


@pytest.mark.parametrize("fault", FAULTS)
async def test_events_never_wait_for_a_failing_backend_and_evictions_wait_until_recovery(
    fault: str, start_daemon: Any, make_config: Any, fake_lmcache: FakeLMCacheServer
) -> None:
    held = fault == "slow"
    timeout = HELD_TIMEOUT if held else BACKEND_TIMEOUT
    d = await lm_daemon(start_daemon, make_config, fake_lmcache.url, timeout)
    d.daemon.default.dispatcher.delivery.max_backoff_s = 0.2  # retried soon after a heal
    fake_lmcache.put(["a", "b", "c"])
    ws = await d.client.ws_connect("/trace?protocol=2")
    assert (await ws.receive_json(timeout=120))["kind"] == "snapshot"
    await answered(
        d, "turn_end", session_id="s1", kv_transfer_params={"chunk_hashes": ["a", "b", "c"]}
    )
    await inject(fake_lmcache, fault)

    data = await answered(
        d, "turn_end", session_id="s1", kv_transfer_params={"chunk_hashes": ["c"]}
    )
    assert data["evicted_count"] == 2
    await answered(d, "turn_start", session_id="s1")  # a prefetch that will fail too
    await answered(d, "turn_end", session_id="s2", kv_transfer_params={"chunk_hashes": ["c", "d"]})
    await answered(d, "session_map", session_id="s1")

    if held:
        # Every reply came while the evict (and the prefetch) hung; the eviction waits.
        await eventually(lambda: bool(fake_lmcache.calls("evict")))
        assert db_outbox(d.config.session_store_path) == {"a": "delete", "b": "delete"}
        assert "a" in fake_lmcache.tiers
        await fake_lmcache.heal()  # the held evict is answered and delivers
        await eventually(lambda: d.daemon.default.dispatcher.backlog == 0)
        assert "a" not in fake_lmcache.tiers and "c" in fake_lmcache.tiers
        await eventually(lambda: not db_outbox(d.config.session_store_path))
        d.assert_consistent()
        return
    # The failure is visible: metrics, the trace, the outbox table.
    errors = d.daemon.metrics.backend_errors
    await eventually(lambda: errors.labels("evict_delete")._value.get() >= 1)
    assert await metric_value(d, "ramakv_backend_errors_total", op="evict_delete") >= 1
    assert await metric_value(d, "ramakv_evict_outbox") == 2
    record = None
    while record is None:
        msg = await ws.receive_json(timeout=120)
        if msg["kind"] == "backend" and msg["op"] == "evict_delete":
            record = msg
    assert record["ok"] is False and record["backlog"] == 2 and record["count"] == 2
    assert db_outbox(d.config.session_store_path) == {"a": "delete", "b": "delete"}
    assert "a" in fake_lmcache.tiers  # nothing evicted yet

    await fake_lmcache.heal()  # the next retry (within 0.2 s) delivers it
    await eventually(lambda: d.daemon.default.dispatcher.backlog == 0)
    assert "a" not in fake_lmcache.tiers and "b" not in fake_lmcache.tiers
    assert "c" in fake_lmcache.tiers
    await eventually(lambda: not db_outbox(d.config.session_store_path))
    assert await metric_value(d, "ramakv_evict_outbox") == 0
    prefetches = fake_lmcache.calls("prefetch")
    # One whole delivery round, awaited (not a sleep): it retries no prefetch.
    await d.daemon.default.dispatcher.delivery.deliver_due()
    assert fake_lmcache.calls("prefetch") == prefetches  # best effort: never retried
    d.assert_consistent()
    await ws.close()


async def test_rereferenced_chunk_is_dropped_from_the_outbox_never_evicted(
    start_daemon: Any, make_config: Any, fake_lmcache: FakeLMCacheServer
) -> None:
    d = await lm_daemon(start_daemon, make_config, fake_lmcache.url)
    d.daemon.default.dispatcher.delivery.max_backoff_s = 0.2  # retried soon after a heal
    fake_lmcache.put(["a0", "b0", "cafe", "c0"])
    await fake_lmcache.set_failure("503")
    await d.turn_end("s1", ["cafe", "a0", "b0"])
    await d.turn_end("t", ["c0"])
    await d.ok("session_suspend", session_id="t")  # c0: a demotion waits in the outbox too
    await d.turn_end("s1", ["cafe"])  # a0 and b0: deletions wait in the outbox
    await eventually(lambda: set(evicted_since(fake_lmcache, 0)) >= {"a0", "b0", "c0"})
    outbox = db_outbox(d.config.session_store_path)
    assert outbox == {"a0": "delete", "b0": "delete", "c0": "demote"}

    mark = len(fake_lmcache.requests)
    await d.turn_end("s2", ["a0"])  # a0 is wanted again before the retry
    await d.ok("snapshot_restore", session_id="t")  # so is c0
    await fake_lmcache.heal()  # the next retry (within 0.2 s) delivers it
    await eventually(lambda: d.daemon.default.dispatcher.backlog == 0)
    # b0 may have been tried again (and refused) before the heal; a0 and c0 never.
    assert set(evicted_since(fake_lmcache, mark)) == {"b0"}
    assert "a0" in fake_lmcache.tiers and "c0" in fake_lmcache.tiers
    await eventually(lambda: not db_outbox(d.config.session_store_path))

    # Released again later: a fresh eviction intent, delivered normally.
    mark = len(fake_lmcache.requests)
    await d.ok("session_close", session_id="s2")
    await eventually(lambda: evicted_since(fake_lmcache, mark) == ["a0"])
    d.assert_consistent()


async def test_prefetch_is_not_retried(
    start_daemon: Any, make_config: Any, fake_lmcache: FakeLMCacheServer
) -> None:
    d = await lm_daemon(start_daemon, make_config, fake_lmcache.url)
    await d.turn_end("s1", ["d1", "d2"])
    await fake_lmcache.refuse()
    await answered(d, "turn_start", session_id="s1")
    await eventually(lambda: d.daemon.metrics.backend_errors.labels("prefetch")._value.get() == 1)
    await fake_lmcache.heal()
    await d.daemon.default.dispatcher.delivery.deliver_due()  # one whole round, awaited
    assert fake_lmcache.calls("prefetch") == []
    assert await metric_value(d, "ramakv_backend_calls_total", op="prefetch") == 1


def test_outbox_survives_kill_while_backend_down(
    daemon_proc_factory: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    port = free_port()  # nothing listens here yet: connection refused
    d = daemon_proc_factory(
        start=False,
        config={"lmcache_url": f"http://127.0.0.1:{port}", "backend_timeout_s": 0.5},
        noop=False,
    )
    d.start()

    def te(sid: str, hashes: list[str]) -> bool:
        body = d.event("turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": hashes})
        return body["ok"]

    assert te("s", ["a0", "b1"])
    assert te("s", ["b1"])
    assert te("t", ["d0", "e0"])
    assert d.event("session_suspend", session_id="t")["ok"]
    assert te("u", ["e2"])
    assert d.event("session_close", session_id="u")["ok"]
    assert wait_for(lambda: metric(d.url, "ramakv_backend_errors_total") >= 1)
    assert metric(d.url, "ramakv_evict_outbox") == 4
    # e2 is wanted again while the backend is still down: it must never be evicted.
    assert te("v", ["e2"])
    d.kill()
    assert set(db_outbox(d.store)) <= {"a0", "d0", "e0", "e2"}
    assert {"a0", "d0", "e0"} <= set(db_outbox(d.store))

    fake = FakeLMCacheProcess(tmp_path, port).start()
    try:
        d.start()
        assert wait_for(lambda: not db_outbox(d.store), 15), db_outbox(d.store)
        calls = [r["body"] for r in fake.requests() if r["path"] == "/memory/evict"]
        sent = sorted(h for c in calls for h in c["chunk_hashes"])
        assert sent == ["a0", "d0", "e0"], calls
        demote = [c for c in calls if "d0" in c["chunk_hashes"]]
        assert demote and demote[0]["locations"] == ["LocalCPUBackend"]
        assert set(db_model(d.store)) == {"s", "t", "v"}
        assert metric(d.url, "ramakv_evict_outbox") == 0
    finally:
        fake.kill()


async def test_an_outage_backs_off_the_backend_not_each_chunk(
    start_daemon: Any, make_config: Any, fake_lmcache: FakeLMCacheServer
) -> None:
    # A failing backend pauses every eviction of it for the backoff: many turns' evictions
    # wait together and one batch probes, instead of each chunk retrying on its own clock.
    d = await lm_daemon(start_daemon, make_config, fake_lmcache.url)
    d.daemon.default.dispatcher.delivery.base_backoff_s = 0.2
    await fake_lmcache.set_failure("503")
    started = time.monotonic()
    for turn in range(40):
        # Every turn drops the previous turn's two chunks: 78 evictions, 39 commits.
        await answered(
            d,
            "turn_end",
            session_id="s1",
            kv_transfer_params={"chunk_hashes": [f"{turn:04x}a", f"{turn:04x}b"]},
        )
    assert d.daemon.default.dispatcher.backlog == 78
    await eventually(lambda: len(fake_lmcache.calls("evict")) >= 1)
    # Probes at 0, 0.2, 0.6, 1.4 s ... (doubling from 0.2 s): however long the turns took
    # on this machine, the calls are the probes that fit in that time, not one per chunk
    # (78) or per commit (39). The bound follows the time taken, so load cannot break it.
    elapsed = time.monotonic() - started
    probes = 2 + math.ceil(math.log2(1 + elapsed / 0.2))
    assert 1 <= len(fake_lmcache.calls("evict")) <= probes < 39
    await fake_lmcache.heal()  # no poke: the next probe after the backoff drains it all
    await eventually(lambda: d.daemon.default.dispatcher.backlog == 0)
    await eventually(lambda: not db_outbox(d.config.session_store_path))
    d.assert_consistent()
