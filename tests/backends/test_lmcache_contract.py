"""Contract: the daemon's LMCacheBackend and the real ascend_ext memory API agree (real chunks)."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("lmcache")
pytestmark = pytest.mark.lmcache

import httpx  # noqa: E402
from support.memapi_rig import cpu_engine, serve, tokens  # noqa: E402

from ascend_ext_dev.devserver import create_app  # noqa: E402
from ramakv_daemon.adapters.backends.lmcache import LMCacheBackend  # noqa: E402
from ramakv_daemon.ports import EvictMode  # noqa: E402

CPU, DISK = "LocalCPUBackend", "LocalDiskBackend"


@pytest.fixture
def devserver_url(tmp_path):
    with cpu_engine(tmp_path / "disk", ddr_mb=4) as engine, serve(create_app(engine)) as url:
        yield url


async def _turn(url: str, toks: list[int]) -> dict:
    async with httpx.AsyncClient() as c:
        return (await c.post(url + "/engine/turn", json={"token_ids": toks})).json()


async def _until(backend, hashes, want, timeout=120.0):
    deadline = time.monotonic() + timeout
    while True:
        res, locs = await backend.query(hashes)
        assert res.ok, res
        if locs.locations == {h: want for h in hashes} or time.monotonic() > deadline:
            return locs.locations
        await asyncio.sleep(0.02)


async def test_adapter_steers_the_real_memory_api(devserver_url):
    backend = LMCacheBackend(devserver_url)
    try:
        turn = await _turn(devserver_url, tokens(4))
        hashes = turn["kv_transfer_params"]["chunk_hashes"]
        assert await _until(backend, hashes, [CPU, DISK]) == {h: [CPU, DISK] for h in hashes}

        res = await backend.evict(hashes[:2], EvictMode.DEMOTE)
        assert res.ok and res.body == {"status": "success", "num_evicted": 2}
        _, locs = await backend.query(hashes)
        assert locs.locations == {
            hashes[0]: [DISK],
            hashes[1]: [DISK],
            hashes[2]: [CPU, DISK],
            hashes[3]: [CPU, DISK],
        }

        res = await backend.prefetch(hashes[:2], "s1:1")
        assert res.ok and res.body == {
            "status": "prefetch_started",
            "lookup_id": "s1:1",
            "num_chunks": 2,
        }
        assert await _until(backend, hashes[:2], [CPU, DISK]) == {
            h: [CPU, DISK] for h in hashes[:2]
        }

        res = await backend.evict(hashes[2:], EvictMode.DELETE)
        assert res.ok and res.body["num_evicted"] == 4
        _, locs = await backend.query(hashes)
        assert locs.locations[hashes[2]] == [] and locs.locations[hashes[3]] == []
        assert (await _turn(devserver_url, tokens(4)))["served"] == [
            "ddr",
            "ddr",
            "computed",
            "computed",
        ]
    finally:
        await backend.close()


async def test_adapter_reports_real_server_errors_without_raising(devserver_url):
    backend = LMCacheBackend(devserver_url)
    try:
        res = await backend.prefetch(["not-hex"], "t")
        assert not res.ok and res.status == 400 and "chunk_hashes" in res.detail
    finally:
        await backend.close()
    dead = LMCacheBackend("http://127.0.0.1:9", timeout=1.0)
    res, locs = await dead.query(["ab"])
    assert not res.ok and res.status == 0 and locs.locations == {}
    await dead.close()
