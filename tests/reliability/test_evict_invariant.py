"""The one invariant under faults: a chunk referenced again is never evicted.

A recording stand-in LMCache (tests/support/lmcache_server.py) runs on the test's own loop
and calls a probe at the very moment it carries out a delete: the probe looks at the
daemon's memory and at its SQLite file right then. Faults: a hanging cache (every call
held longer than prefetches can wait), commits failing with "database is locked".
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import pytest
from support.daemon_app import DaemonClient
from support.lmcache_server import FakeLMCacheServer
from support.reliability import db_model

from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.ports import WriteBatch

HANG = 1.0  # every cache call is held this long (under the 2 s backend timeout)


class Probe:
    """Called by the fake as each delete happens: records every hash then referenced."""

    def __init__(self, d: DaemonClient, fake: FakeLMCacheServer) -> None:
        self.d = d
        self.fake = fake
        self.deleted: list[str] = []
        self.violations: list[tuple[str, str]] = []

    def __call__(self, hashes: list[str]) -> None:
        self.deleted.extend(hashes)
        refs = self.d.daemon.default.manager.refcounts.counts
        stored = db_model(self.d.config.session_store_path)
        held = {h for s in stored.values() if not s.suspended for h in s.chunk_hashes}
        held.update(h for s in stored.values() for hold in s.fork_holds for h in hold)
        for h in hashes:
            if h in refs:
                self.violations.append((h, "memory"))
            if h in held:
                self.violations.append((h, "committed"))

    def history(self) -> dict[str, list[tuple[float, str, dict]]]:
        """For each violating hash, the evicts and keeps the fake received naming it."""
        return {
            h: [
                (
                    round(r.at, 3),
                    r.path,
                    {k: v for k, v in (r.body or {}).items() if k != "chunk_hashes"},
                )
                for r in self.fake.requests
                if r.path != "/memory/prefetch" and h in (r.body or {}).get("chunk_hashes", [])
            ]
            for h, _ in self.violations
        }


async def eventually(pred: Callable[[], bool], timeout: float = 120.0) -> None:
    """Await until ``pred()`` holds (a generous bound; the condition is what counts)."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def received_evict(fake: FakeLMCacheServer, h: str, since: int = 0) -> bool:
    """Whether an evict naming ``h`` reached the fake (from request number ``since`` on)."""
    return any(
        r.path == "/memory/evict" and h in (r.body or {}).get("chunk_hashes", [])
        for r in fake.requests[since:]
    )


async def rig(
    start_daemon: Any, make_config: Any, fake: FakeLMCacheServer, store: Any = None
) -> tuple[DaemonClient, Probe]:
    # A keep confirmed within evict_defer_s of the write is certainly in time: 30 s is far
    # longer than any hang here, so "kept" never depends on how loaded the machine is.
    cfg = make_config(
        noop_backend=False, lmcache_url=fake.url, backend_timeout_s=2.0, evict_defer_s=30.0
    )
    d = await start_daemon(cfg, store=store(cfg.session_store_path) if store else None)
    d.daemon.default.dispatcher.delivery.base_backoff_s = 0.05
    probe = Probe(d, fake)
    fake.on_delete = probe
    return d, probe


async def reproduce_hang(d: DaemonClient, fake: FakeLMCacheServer) -> None:
    """The issue's reproduction: 150 prefetches hang on the cache, A drops aa, B takes it."""
    fake.put(["aa", "bb"] + [f"{i:04x}" for i in range(150)])
    for i in range(150):
        await d.turn_end(f"w{i}", [f"{i:04x}"])
    await fake.set_failure("slow", delay=HANG)
    await asyncio.gather(*(d.ok("turn_start", session_id=f"w{i}") for i in range(150)))
    await d.turn_end("A", ["aa", "bb"])
    await d.turn_end("A", ["bb"])  # aa drops to 0: its eviction is queued and sent
    await eventually(lambda: received_evict(fake, "aa"))  # not held behind the prefetches
    await d.turn_end("B", ["aa"])  # acknowledged while the evict is still in the cache


async def test_deferring_cache_keeps_a_chunk_referenced_after_its_evict_was_written(
    start_daemon: Any, make_config: Any, fake_lmcache: FakeLMCacheServer
) -> None:
    fake_lmcache.defers = True
    d, probe = await rig(start_daemon, make_config, fake_lmcache)
    await reproduce_hang(d, fake_lmcache)
    window = d.daemon.default.dispatcher.window
    kept = d.daemon.metrics.window_rereferences.labels("kept")
    # The keep gets through while the evict call is still out, and is confirmed in time.
    await eventually(lambda: kept._value.get() >= 1 and not window.keeps)
    await fake_lmcache.heal()
    await eventually(lambda: d.daemon.default.dispatcher.backlog == 0)
    fake_lmcache.fire_deferred()  # the deferral ends: x's delete was cancelled
    assert "aa" in fake_lmcache.tiers and probe.violations == []
    assert d.daemon.metrics.window_rereferences.labels("exposed")._value.get() == 0
    # Released again, x goes for real: the new evict's generation is newer than the keep.
    await d.turn_end("B", [])
    await eventually(
        lambda: (
            d.daemon.default.dispatcher.backlog == 0
            and len([b for b in fake_lmcache.calls("evict") if "aa" in b["chunk_hashes"]]) == 2
        )
    )
    fake_lmcache.fire_deferred()
    assert "aa" not in fake_lmcache.tiers and probe.violations == []


async def test_stock_cache_window_is_measured_and_reported(
    start_daemon: Any, make_config: Any, fake_lmcache: FakeLMCacheServer
) -> None:
    d, probe = await rig(start_daemon, make_config, fake_lmcache)
    ws = await d.client.ws_connect("/trace?protocol=2")
    await reproduce_hang(d, fake_lmcache)
    exposed = d.daemon.metrics.window_rereferences.labels("exposed")
    await eventually(lambda: exposed._value.get() >= 1)
    await fake_lmcache.heal()
    await eventually(lambda: "aa" in probe.deleted)
    # A stock cache acts when it gets to it: here after B took x. The daemon cannot stop
    # that, but it is never silent: the metric, the trace record and the window histogram.
    assert ("aa", "memory") in probe.violations
    record = None
    while record is None:
        msg = await ws.receive_json(timeout=120)
        if msg.get("kind") == "evict_window" and msg["outcome"] == "exposed":
            record = msg
    assert "aa" in record["hashes"]
    resp = await d.client.get("/metrics")
    text = await resp.text()
    assert 'ramakv_evict_window_rereferences_total{outcome="exposed"} 1.0' in text
    assert "ramakv_evict_window_seconds_count" in text
    await ws.close()


class LockedStore(SqliteSessionStore):
    """A real store whose commits, while ``gate`` is set, wait for it to be released and
    then fail as SQLite does when another process holds the lock."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.gate: asyncio.Event | None = None
        self.rng: random.Random | None = None

    async def write(self, batch: WriteBatch) -> None:
        gate = self.gate
        if gate is not None:
            await gate.wait()
            raise sqlite3.OperationalError("database is locked")
        if self.rng is not None and self.rng.random() < 0.15:
            await asyncio.sleep(0)
            raise sqlite3.OperationalError("database is locked")
        await super().write(batch)


async def test_a_release_still_being_committed_is_not_deliverable(
    start_daemon: Any, make_config: Any, fake_lmcache: FakeLMCacheServer
) -> None:
    d, probe = await rig(start_daemon, make_config, fake_lmcache, LockedStore)
    store: LockedStore = d.daemon.store  # type: ignore[assignment]
    dispatcher = d.daemon.default.dispatcher
    dispatcher.delivery.max_backoff_s = 0.2  # retried soon after the heal, not in 60 s
    fake_lmcache.put(["aa", "bb"])
    await fake_lmcache.set_failure("503")  # the intent for aa waits in the outbox
    await d.turn_end("A", ["aa", "bb"])
    await d.turn_end("A", ["bb"])
    await eventually(lambda: dispatcher.delivery.failures >= 1)
    await d.turn_end("B", ["aa"])  # committed: aa is referenced again
    since = len(fake_lmcache.requests)
    store.gate = asyncio.Event()
    release = asyncio.ensure_future(
        d.post({"type": "turn_end", "session_id": "B", "kv_transfer_params": {"chunk_hashes": []}})
    )
    await eventually(lambda: "aa" not in d.daemon.default.manager.refcounts)  # applied, in doubt
    await fake_lmcache.heal()  # the next retry (within 0.2 s) looks at aa
    # The dispatcher looked at x and set it aside until the commit is decided.
    await eventually(lambda: any(h == "aa" for _, _, h in dispatcher.outbox.later))
    assert not received_evict(fake_lmcache, "aa", since)
    store.gate.set()
    store.gate = None
    status, body = await release
    assert status == 503 and "database is locked" in body["error"]
    assert d.daemon.default.manager.refcounts.get("aa") == 1  # rolled back
    await eventually(lambda: "aa" not in dispatcher.outbox)  # the recheck forgot it
    assert not received_evict(fake_lmcache, "aa", since) and probe.violations == []


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_fault_mix_never_evicts_a_referenced_chunk(
    seed: int, start_daemon: Any, make_config: Any, fake_lmcache: FakeLMCacheServer
) -> None:
    """Random turns over shared chunks, 15 % of commits failing "database is locked",
    the cache hanging in spells (some past the backend timeout, so it acts on evicts the
    daemon saw fail), a deferring cache whose deferral ends after the run (it is 30 s):
    no delete ever hits a chunk held in memory or in the file at that moment."""
    rng = random.Random(seed)
    fake_lmcache.defers = True
    d, probe = await rig(start_daemon, make_config, fake_lmcache, LockedStore)
    store: LockedStore = d.daemon.store  # type: ignore[assignment]
    store.rng = random.Random(seed)
    d.daemon.default.dispatcher.delivery.max_backoff_s = 0.2  # retried soon after a heal
    pool = [f"{i:02x}" for i in range(24)]
    fake_lmcache.put(pool)
    statuses: list[int] = []

    async def session(sid: str) -> None:
        for _ in range(40):
            kind = rng.random()
            if kind < 0.8:
                body = {
                    "type": "turn_end",
                    "session_id": sid,
                    "kv_transfer_params": {"chunk_hashes": rng.sample(pool, rng.randint(0, 6))},
                }
            elif kind < 0.9:
                body = {"type": "turn_start", "session_id": sid}
            else:
                body = {"type": "session_close", "session_id": sid}
            status, _ = await d.post(body)
            statuses.append(status)

    async def weather() -> None:
        for _ in range(6):
            await fake_lmcache.set_failure("slow", delay=rng.choice([0.05, 0.3, 2.5]))
            await asyncio.sleep(0)
            for _ in range(rng.randint(1, 20)):
                await asyncio.sleep(0.01)
            await fake_lmcache.heal()

    await asyncio.gather(weather(), *(session(f"s{i}") for i in range(8)))
    assert 503 in statuses and 200 in statuses
    store.rng = None
    await fake_lmcache.heal()  # the next retry (within 0.2 s) delivers the rest
    await eventually(
        lambda: (
            d.daemon.default.dispatcher.backlog == 0
            and not d.daemon.default.dispatcher.window.keeps
        )
    )
    fake_lmcache.fire_deferred()
    assert probe.violations == [], probe.history()
    d.assert_consistent()
    assert d.daemon.metrics.window_rereferences.labels("exposed")._value.get() == 0


async def test_a_restart_inside_the_deferral_keeps_what_the_last_run_re_referenced(
    start_daemon: Any, make_config: Any, fake_lmcache: FakeLMCacheServer
) -> None:
    """The evict of aa is pending in the cache; B takes aa, but the keep cannot get through
    before the daemon stops. The outbox row outlives the deferral, so the next run finds aa
    referenced with an eviction it may have sent, and keeps it."""
    fake_lmcache.defers = True
    d, probe = await rig(start_daemon, make_config, fake_lmcache)
    fake_lmcache.put(["aa", "bb"])
    await d.turn_end("A", ["aa", "bb"])
    await d.turn_end("A", ["bb"])
    await eventually(
        lambda: received_evict(fake_lmcache, "aa") and d.daemon.default.dispatcher.backlog == 0
    )
    assert fake_lmcache.deferred.pending.keys() == {"aa"}
    await fake_lmcache.set_failure("503")  # keeps fail from now on
    await d.turn_end("B", ["aa"])
    await eventually(lambda: any(r.path == "/memory/keep" for r in fake_lmcache.requests))
    cfg = d.config
    await d.close()  # the keep never got through; aa's row is still stored
    await fake_lmcache.heal()
    d2 = await start_daemon(cfg)
    probe.d = d2
    kept = d2.daemon.metrics.window_rereferences.labels("kept")
    await eventually(lambda: kept._value.get() >= 1)
    assert d2.daemon.metrics.evictions_repeated._value.get() == 0  # aa was not re-sent
    fake_lmcache.fire_deferred()
    assert "aa" in fake_lmcache.tiers and probe.violations == [], probe.history()


async def test_a_repeated_delivery_after_a_restart_is_harmless_and_counted(
    start_daemon: Any, make_config: Any, fake_lmcache: FakeLMCacheServer
) -> None:
    fake_lmcache.defers = True
    d, probe = await rig(start_daemon, make_config, fake_lmcache)
    fake_lmcache.put(["aa", "bb"])
    await d.turn_end("A", ["aa", "bb"])
    await d.turn_end("A", ["bb"])
    await eventually(
        lambda: received_evict(fake_lmcache, "aa") and d.daemon.default.dispatcher.backlog == 0
    )
    cfg = d.config
    await d.close()  # stopped inside the deferral: the row stays
    d2 = await start_daemon(cfg)
    ws = await d2.client.ws_connect("/trace?protocol=2")
    repeated = d2.daemon.metrics.evictions_repeated
    await eventually(lambda: repeated._value.get() == 1)
    evicts = [b for b in fake_lmcache.calls("evict") if "aa" in b["chunk_hashes"]]
    assert len(evicts) == 2 and evicts[1]["generation"] > evicts[0]["generation"]
    record = None
    while record is None:
        msg = await ws.receive_json(timeout=120)
        if msg.get("kind") == "evict_window" and msg["outcome"] == "repeated":
            record = msg
    assert record["hashes"] == ["aa"]
    assert fake_lmcache.fire_deferred() >= 1  # one delete: the repeat replaced the pending one
    assert "aa" not in fake_lmcache.tiers and probe.violations == []
    await ws.close()


async def drop_aa(d: DaemonClient, fake: FakeLMCacheServer) -> dict:
    """A holds aa and bb, then drops aa: its deferred evict reaches the cache; its body."""
    fake.put(["aa", "bb"])
    await d.turn_end("A", ["aa", "bb"])
    await d.turn_end("A", ["bb"])
    dispatcher = d.daemon.default.dispatcher
    await eventually(lambda: received_evict(fake, "aa") and dispatcher.backlog == 0)
    return [b for b in fake.calls("evict") if "aa" in b["chunk_hashes"]][-1]


def outcome(d: DaemonClient, name: str) -> float:
    return d.daemon.metrics.window_rereferences.labels(name)._value.get()


async def deferring_rig(
    start_daemon: Any, make_config: Any, fake: FakeLMCacheServer, defer_s: float
) -> tuple[DaemonClient, Probe]:
    fake.defers = True
    cfg = make_config(
        noop_backend=False, lmcache_url=fake.url, backend_timeout_s=2.0, evict_defer_s=defer_s
    )
    d = await start_daemon(cfg)
    probe = Probe(d, fake)
    fake.on_delete = probe
    return d, probe


async def test_a_keep_slower_than_the_deferral_holds_the_commit_until_it_is_answered(
    start_daemon: Any, make_config: Any, fake_lmcache: FakeLMCacheServer
) -> None:
    """The keep for aa is held in the cache while aa's deferral ends and its delete runs:
    B's turn_end is not acknowledged until the keep's answer ("late") says so, so the
    delete came before B's reference was committed (a cache miss, never an eviction of a
    referenced chunk). The deadline (60 s + 1.5 s here) plays no part."""
    d, probe = await deferring_rig(start_daemon, make_config, fake_lmcache, 60.0)
    await drop_aa(d, fake_lmcache)
    fake_lmcache.keep_hold = asyncio.Event()
    reply = asyncio.ensure_future(d.turn_end("B", ["aa"]))
    # The first keep call timed out (backend_timeout_s) and was sent again: the commit
    # has waited past any fixed wait a loaded cache could outlast, and still waits.
    await eventually(
        lambda: len([r for r in fake_lmcache.requests if r.path == "/memory/keep"]) >= 2
    )
    assert not reply.done()
    assert fake_lmcache.fire_deferred() == 2  # aa's two tiers, while the keep is held
    assert not reply.done()
    # At that moment B's change was applied in memory, not committed: nothing in the file.
    assert probe.violations == [("aa", "memory")]
    fake_lmcache.keep_hold.set()  # every held call is answered "late" (one reaches us)
    await reply
    await eventually(lambda: outcome(d, "missed") == 1)
    assert outcome(d, "exposed") == 0 and outcome(d, "kept") == 0
    assert "aa" not in fake_lmcache.tiers


async def test_an_unanswered_keep_releases_the_commit_only_past_the_evicts_deadline(
    start_daemon: Any, make_config: Any, fake_lmcache: FakeLMCacheServer
) -> None:
    """The keep for aa never gets through (held). B's turn_end is acknowledged only after
    the evict's not_after_ns, past which the cache drops the delete instead of carrying it
    out; then aa is released again while that keep is still unanswered (the newer evict
    supersedes it: nothing to report, nothing exposed), and the held keep arriving last
    cancels nothing newer."""
    d, probe = await deferring_rig(start_daemon, make_config, fake_lmcache, 0.2)
    first = await drop_aa(d, fake_lmcache)
    fake_lmcache.keep_hold = asyncio.Event()
    await d.turn_end("B", ["aa"])
    acknowledged = time.time_ns()
    assert any(r.path == "/memory/keep" for r in fake_lmcache.requests)
    assert acknowledged > first["not_after_ns"]  # not before the cache's deadline
    assert fake_lmcache.fire_deferred() == 0  # the deferral ends: past its deadline, dropped
    assert fake_lmcache.deferred.expired == 1 and "aa" in fake_lmcache.tiers
    # Released again with the keep still held: a newer evict, then the old keep lands.
    await d.turn_end("B", [])
    await eventually(
        lambda: len([b for b in fake_lmcache.calls("evict") if "aa" in b["chunk_hashes"]]) == 2
    )
    assert not d.daemon.default.dispatcher.window.keeps  # superseded
    fake_lmcache.keep_hold.set()
    await eventually(lambda: "aa" in fake_lmcache.deferred.kept)  # the held keep landed
    fake_lmcache.deferred.wall = lambda: 0  # the stand-in's clock: the deadline not reached
    assert fake_lmcache.fire_deferred() == 2  # the keep (older) did not cancel this delete
    assert probe.violations == [], probe.history()
    assert outcome(d, "exposed") == 0
    d.assert_consistent()
