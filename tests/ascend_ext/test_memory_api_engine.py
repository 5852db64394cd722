"""The memory API on a real lmcache 0.5.6 CPU engine: tiers, prefetch, evict, query, errors."""

from __future__ import annotations

import pytest

pytest.importorskip("lmcache")
pytestmark = pytest.mark.lmcache

import httpx  # noqa: E402
from support.memapi_rig import CPU, DISK, cpu_engine, on_disk, serve, tokens, wait_prefetch  # noqa: E402
from support.reliability import wait_for  # noqa: E402

from ascend_ext_dev.devserver import create_app  # noqa: E402


@pytest.fixture
def api(tmp_path):
    """(client, engine) for a devserver app on a loopback port with a fresh disk dir."""
    with cpu_engine(tmp_path / "disk", ddr_mb=4) as engine, serve(create_app(engine)) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            yield client, engine


def _turn(client, toks):
    r = client.post("/engine/turn", json={"token_ids": toks})
    assert r.status_code == 200, r.text
    return r.json()


def _settle(client, hashes, want, timeout=120.0):
    """Query until every hash sits exactly in `want` (disk writes are asynchronous)."""
    got: dict = {}

    def settled() -> bool:
        got.clear()
        got.update(client.post("/memory/query", json={"chunk_hashes": hashes}).json())
        return all(got[h] == want for h in hashes)

    wait_for(settled, timeout, every=0.02)  # the caller asserts on what it returns
    return got


def test_engine_turn_hands_out_blake3_chain_hashes(api):
    """The devserver engine stores under ascend_ext.hashing's chain, as install() makes vLLM's
    connector do, so hashes agree with any other process (no PYTHONHASHSEED needed)."""
    from ascend_ext.hashing import chain_hashes_hex, lmcache_hash_func

    client, engine = api
    toks = tokens(2) + [7, 8, 9]  # a partial tail chunk is neither saved nor reported
    turn = _turn(client, toks)
    assert engine.token_database.hash_func is lmcache_hash_func
    assert turn["kv_transfer_params"]["chunk_hashes"] == chain_hashes_hex(tokens(2), 16)
    assert turn["tail_tokens"] == 3


def test_demote_prefetch_delete_round_trip(api):
    client, _ = api
    first = _turn(client, tokens(3))
    hashes = first["kv_transfer_params"]["chunk_hashes"]
    assert first["served"] == ["computed"] * 3 and len(set(hashes)) == 3
    assert _settle(client, hashes, [CPU, DISK]) == {h: [CPU, DISK] for h in hashes}

    r = client.post("/memory/evict", json={"chunk_hashes": hashes, "locations": [CPU]})
    assert r.json() == {"status": "success", "num_evicted": 3}
    assert client.post("/memory/query", json={"chunk_hashes": hashes}).json() == {
        h: [DISK] for h in hashes
    }

    r = client.post("/memory/prefetch", json={"chunk_hashes": hashes, "lookup_id": "s1:2"})
    assert r.json() == {"status": "prefetch_started", "lookup_id": "s1:2", "num_chunks": 3}
    status = wait_prefetch(client, "s1:2")
    assert status["state"] == "done" and status["loaded"] == 3
    assert client.post("/memory/query", json={"chunk_hashes": hashes}).json() == {
        h: [CPU, DISK] for h in hashes
    }
    again = _turn(client, tokens(3))  # the prefetched bytes are the stored bytes
    assert again["served"] == ["ddr"] * 3 and again["bytes_ok"] is True

    r = client.post("/memory/evict", json={"chunk_hashes": hashes})
    assert r.json() == {"status": "success", "num_evicted": 6}
    assert client.post("/memory/query", json={"chunk_hashes": hashes}).json() == {
        h: [] for h in hashes
    }
    assert _turn(client, tokens(3))["served"] == ["computed"] * 3


def test_served_from_disk_after_demotion_with_real_bytes(api):
    client, _ = api
    hashes = _turn(client, tokens(2, start=500))["kv_transfer_params"]["chunk_hashes"]
    _settle(client, hashes, [CPU, DISK])
    client.post("/memory/evict", json={"chunk_hashes": hashes, "locations": [CPU]})
    out = _turn(client, tokens(2, start=500))
    assert out["served"] == ["disk", "disk"] and out["bytes_ok"] is True


def test_evict_waits_for_the_pending_disk_write(api):
    """An evict right after the store must not be undone by the store's late disk write."""
    client, engine = api
    worker = engine.storage_manager.storage_backends[DISK].disk_worker
    for i in range(5):
        hashes = _turn(client, tokens(4, start=1000 + 100 * i))["kv_transfer_params"][
            "chunk_hashes"
        ]
        client.post("/memory/evict", json={"chunk_hashes": hashes})  # races the disk writes

        # Every disk write still pending at the evict has landed (a condition, not a time):
        # a late write that undid the evict would show in the query now.
        def drained() -> bool:
            with worker.put_lock:
                return not worker.put_tasks

        assert wait_for(drained, every=0.01), "disk writes never finished"
        got = client.post("/memory/query", json={"chunk_hashes": hashes}).json()
        assert got == {h: [] for h in hashes}


def test_query_is_per_chunk_not_prefix(api):
    client, _ = api
    hashes = _turn(client, tokens(3, start=3000))["kv_transfer_params"]["chunk_hashes"]
    _settle(client, hashes, [CPU, DISK])
    client.post("/memory/evict", json={"chunk_hashes": hashes[:1]})  # a hole at the front
    got = client.post("/memory/query", json={"chunk_hashes": hashes + ["abc"]}).json()
    assert got == {hashes[0]: [], hashes[1]: [CPU, DISK], hashes[2]: [CPU, DISK], "abc": []}


@pytest.mark.parametrize(
    "body,needle",
    [
        ({}, "missing required field 'chunk_hashes'"),
        ({"chunk_hashes": "abc"}, "'chunk_hashes' must be a list of strings"),
        ({"chunk_hashes": [1, 2]}, "'chunk_hashes' must be a list of strings"),
        ({"chunk_hashes": ["0xzz"]}, "'chunk_hashes' has a non-hex entry"),
        ({"chunk_hashes": ["a"], "locations": "LocalCPUBackend"}, "'locations' must be a list"),
        ({"chunk_hashes": ["a"], "locations": ["Nope"]}, "'locations' names unknown backend"),
    ],
)
def test_evict_bad_fields_are_400_naming_the_field(api, body, needle):
    client, _ = api
    r = client.post("/memory/evict", json=body)
    assert r.status_code == 400 and needle in r.json()["error"]


def test_other_bad_bodies(api):
    client, _ = api
    assert client.post("/memory/query", content=b"{nope").status_code == 400
    assert client.post("/memory/query", json=[1]).json() == {"error": "body must be a JSON object"}
    r = client.post("/memory/prefetch", json={"chunk_hashes": ["a"], "lookup_id": 7})
    assert r.status_code == 400 and "'lookup_id'" in r.json()["error"]
    assert client.get("/memory/prefetch/unknown").status_code == 404
    assert client.post("/engine/turn", json={"token_ids": ["x"]}).status_code == 400


def test_no_engine_and_not_scheduler_is_503():
    from types import SimpleNamespace

    from fastapi import FastAPI

    from ascend_ext.memory_api import router

    app = FastAPI()
    app.include_router(router)
    app.state.lmcache_adapter = SimpleNamespace(lmcache_engine=None)
    with serve(app) as url:
        r = httpx.post(url + "/memory/query", json={"chunk_hashes": ["a"]})
    assert r.status_code == 503 and "no LMCache engine" in r.json()["error"]


def test_prefetch_with_ddr_full_does_not_hang(tmp_path):
    """More chunks than DDR holds: LRU makes room; with every DDR chunk pinned, skip."""
    with cpu_engine(tmp_path / "d", ddr_mb=0.05) as engine, serve(create_app(engine)) as url:
        client = httpx.Client(base_url=url, timeout=30)
        hashes: list[str] = []
        for i in range(4):  # DDR holds ~12 chunks: store in batches it can stage
            batch = _turn(client, tokens(10, start=7000 + 1000 * i))
            hashes += batch["kv_transfer_params"]["chunk_hashes"]
            assert wait_for(lambda h=hashes: on_disk(client, h), every=0.02), (
                "disk writes did not land"
            )
        client.post("/memory/evict", json={"chunk_hashes": hashes, "locations": [CPU]})
        client.post("/memory/prefetch", json={"chunk_hashes": hashes, "lookup_id": "big"})
        status = wait_prefetch(client, "big")
        assert status["state"] == "done" and status["loaded"] + status["ddr_full"] == 40
        in_ddr = [
            h
            for h, v in client.post("/memory/query", json={"chunk_hashes": hashes}).json().items()
            if CPU in v
        ]
        assert 0 < len(in_ddr) < 40 and set(in_ddr) <= set(hashes[-len(in_ddr) :])  # LRU

        cpu = engine.storage_manager.storage_backends[CPU]
        with cpu.cpu_lock:
            pinned = list(cpu.hot_cache)
        for key in pinned:
            cpu.pin(key)
        try:
            rest = [h for h in hashes if h not in in_ddr]
            client.post("/memory/prefetch", json={"chunk_hashes": rest, "lookup_id": "pinned"})
            status = wait_prefetch(client, "pinned")
            assert status["state"] == "done" and status["ddr_full"] > 0
        finally:
            for key in pinned:
                cpu.unpin(key)
        client.close()


def test_prefetch_of_a_ddr_chunk_marks_it_recently_used(api):
    """A chunk already in DDR is skipped by the prefetch but moved to the LRU's safe end,
    so the next eviction under pressure takes an older chunk, not the one about to be used."""
    from ascend_ext.memory_ops import MemoryOps

    client, engine = api
    first = _turn(client, tokens(2))["kv_transfer_params"]["chunk_hashes"]
    second = _turn(client, tokens(2, start=1000))["kv_transfer_params"]["chunk_hashes"]
    _settle(client, first + second, [CPU, DISK])
    cpu = engine.storage_manager.storage_backends[CPU]
    key = MemoryOps(engine).key_for(first[0])
    with cpu.cpu_lock:
        assert list(cpu.hot_cache).index(key) < len(cpu.hot_cache) - 1  # not newest yet
    r = client.post("/memory/prefetch", json={"chunk_hashes": [first[0]], "lookup_id": "t1"})
    assert r.status_code == 200, r.text
    assert wait_prefetch(client, "t1")["already_ddr"] == 1
    with cpu.cpu_lock:
        assert list(cpu.hot_cache)[-1] == key  # most recently used now
