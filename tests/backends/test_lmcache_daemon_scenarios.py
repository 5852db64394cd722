"""The daemon (built by bootstrap) steering a real CPU LMCache through LMCacheBackend."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

pytest.importorskip("lmcache")
pytestmark = pytest.mark.lmcache

import httpx  # noqa: E402
from support.memapi_rig import cpu_engine, serve, tokens  # noqa: E402

from ascend_ext_dev.devserver import create_app  # noqa: E402
from ramakv_daemon.adapters.backends.lmcache import LMCacheBackend  # noqa: E402
from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore  # noqa: E402
from ramakv_daemon.bootstrap import build  # noqa: E402
from ramakv_daemon.config import Config  # noqa: E402

CPU, DISK = "LocalCPUBackend", "LocalDiskBackend"


@pytest.fixture
async def rig(tmp_path):
    """(service, devserver url) with a real engine behind the daemon's LMCacheBackend."""
    with cpu_engine(tmp_path / "disk", ddr_mb=4) as engine, serve(create_app(engine)) as url:
        db = str(tmp_path / "s.db")
        svc = build(Config(session_store_path=db), SqliteSessionStore(db), LMCacheBackend(url))
        await svc.start()
        try:
            yield svc, url
        finally:
            await svc.stop()
            await svc.backend.close()


async def _turn(url, toks):
    async with httpx.AsyncClient() as c:
        r = await c.post(url + "/engine/turn", json={"token_ids": toks})
        return r.json()["kv_transfer_params"]


async def _where(url, hashes, want=None, timeout=120.0):
    """Query (until every hash is in `want`, when given: disk writes are asynchronous, and a
    loaded CI machine can take long, so the overall limit is only a hang guard)."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as c:
        while True:
            got = (await c.post(url + "/memory/query", json={"chunk_hashes": hashes})).json()
            if want is None or all(v == want for v in got.values()):
                return got
            assert time.monotonic() < deadline, f"chunks never reached {want}: {got}"
            await asyncio.sleep(0.02)


async def _event(svc, **body):
    status, answer = await svc.handle(body)
    assert status == 200 and answer["ok"], answer
    await svc.default.dispatcher.drain()
    return answer["data"]


async def test_turn_end_drop_removes_unshared_chunks(rig):
    svc, url = rig
    kv1 = await _turn(url, tokens(3))
    await _where(url, kv1["chunk_hashes"], [CPU, DISK])
    await _event(svc, type="turn_end", session_id="a", kv_transfer_params=kv1)
    kv2 = await _turn(url, tokens(1, start=900))
    data = await _event(svc, type="turn_end", session_id="a", kv_transfer_params=kv2)
    assert data["evicted_count"] == 3
    assert await _where(url, kv1["chunk_hashes"], []) == {h: [] for h in kv1["chunk_hashes"]}


async def test_suspend_orders_cold_and_restore_finds_the_chunks_in_place(rig):
    # ascend_ext has /memory/order: a suspend moves the chunks to the cold end of the
    # eviction order and removes nothing (issue 31: a wrong guess must cost nothing).
    svc, url = rig
    kv = await _turn(url, tokens(3, start=2000))
    hashes = kv["chunk_hashes"]
    await _where(url, hashes, [CPU, DISK])
    await _event(svc, type="turn_end", session_id="b", kv_transfer_params=kv)
    await _event(svc, type="session_suspend", session_id="b")
    assert not svc.backend.order_missing
    assert await _where(url, hashes) == {h: [CPU, DISK] for h in hashes}
    await _event(svc, type="snapshot_restore", session_id="b")
    assert await _where(url, hashes, [CPU, DISK]) == {h: [CPU, DISK] for h in hashes}


async def test_suspend_demotes_where_the_cache_has_no_order_route(rig):
    svc, url = rig
    svc.backend.order_missing = True  # as after a stock memory API's 404
    kv = await _turn(url, tokens(3, start=3000))
    hashes = kv["chunk_hashes"]
    await _where(url, hashes, [CPU, DISK])
    await _event(svc, type="turn_end", session_id="b", kv_transfer_params=kv)
    await _event(svc, type="session_suspend", session_id="b")
    assert await _where(url, hashes, [DISK]) == {h: [DISK] for h in hashes}
    await _event(svc, type="snapshot_restore", session_id="b")
    assert await _where(url, hashes, [CPU, DISK]) == {h: [CPU, DISK] for h in hashes}


async def test_shared_chunk_survives_another_sessions_close(rig):
    svc, url = rig
    shared = await _turn(url, tokens(2, start=4000))
    own = await _turn(url, tokens(1, start=5000))
    await _where(url, shared["chunk_hashes"] + own["chunk_hashes"], [CPU, DISK])
    await _event(
        svc,
        type="turn_end",
        session_id="c",
        kv_transfer_params={"chunk_hashes": shared["chunk_hashes"] + own["chunk_hashes"]},
    )
    await _event(svc, type="turn_end", session_id="d", kv_transfer_params=shared)
    await _event(svc, type="session_close", session_id="c")
    # The eviction is delivered after the answer and the delete is deferred
    # (evict_defer_s): wait for it, then check the shared chunks are still everywhere.
    await _where(url, own["chunk_hashes"], [])
    got = await _where(url, shared["chunk_hashes"] + own["chunk_hashes"])
    assert all(got[h] == [CPU, DISK] for h in shared["chunk_hashes"])
    assert got[own["chunk_hashes"][0]] == []


async def test_turn_end_stops_the_restores_prefetch_still_loading(tmp_path):
    """The engine's worker is held inside the restore's first disk load; the turn_end that
    says the request was served makes the daemon cancel it: the rest is never loaded."""
    with cpu_engine(tmp_path / "disk", ddr_mb=4) as engine, serve(create_app(engine)) as url:
        db = str(tmp_path / "s.db")
        backend = LMCacheBackend(url)
        backend.order_missing = True  # suspend demotes: the restore has disk loads to do
        svc = build(Config(session_store_path=db), SqliteSessionStore(db), backend)
        await svc.start()
        sm = engine.storage_manager
        original, inside, release = sm.get, threading.Event(), threading.Event()

        def held_get(*args, **kwargs):
            if not inside.is_set():
                inside.set()
                release.wait()
            return original(*args, **kwargs)

        try:
            kv = await _turn(url, tokens(4, start=6000))
            hashes = kv["chunk_hashes"]
            await _where(url, hashes, [CPU, DISK])
            await _event(svc, type="turn_end", session_id="e", kv_transfer_params=kv)
            await _event(svc, type="session_suspend", session_id="e")
            await _where(url, hashes, [DISK])
            sm.get = held_get
            await _event(svc, type="snapshot_restore", session_id="e")  # the daemon's 1st
            assert await asyncio.to_thread(inside.wait, 120), "the prefetch never loaded"
            await _event(svc, type="turn_end", session_id="e", kv_transfer_params=kv)
            release.set()
            tag = f"prefetch_e:{svc.default.dispatcher.prefetcher.boot_id}:1"
            deadline = time.monotonic() + 120  # a hang guard: the wait is for its state
            async with httpx.AsyncClient(base_url=url) as c:
                while (status := (await c.get(f"/memory/prefetch/{tag}")).json())[
                    "state"
                ] == "running":
                    assert time.monotonic() < deadline, f"prefetch {tag} still running"
                    await asyncio.sleep(0.02)  # polling its state, not waiting for time
            assert status["state"] == "cancelled"
            assert status["loaded"] == 1 and status["skipped"] == 3
            got = await _where(url, hashes)
            assert got[hashes[0]] == [CPU, DISK] and all(got[h] == [DISK] for h in hashes[1:])
            text = svc.metrics.render().decode()
            assert 'ramakv_prefetch_cancelled_total{outcome="stopped"} 1.0' in text
            assert 'ramakv_prefetch_cancelled_chunks_total{outcome="stopped"} 3.0' in text
        finally:
            release.set()
            sm.get = original
            await svc.stop()
            await svc.backend.close()
