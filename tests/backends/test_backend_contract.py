"""The backend contract, parametrised over the adapters, each against its stand-in cache:
ascend_ext's memory API (LMCacheBackend) and the stock LMCache multiprocess server
(LMCacheMPBackend). A new adapter joins by adding a rig to RIGS."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from support.lmcache_mp_server import FakeLMCacheMPServer, _rank
from support.lmcache_server import CPU, DISK, FakeLMCacheServer

from ramakv_daemon.adapters.backends.lmcache import LMCacheBackend
from ramakv_daemon.adapters.backends.lmcache_mp import LMCacheMPBackend
from ramakv_daemon.ports import Backend, EvictMode

HASHES = ["0a" * 32, "1b" * 32, "2c" * 32]
MODEL = "tiny/llama"


@dataclass
class Rig:
    """An adapter, its stand-in, and how to plant chunks and read their tiers there."""

    backend: Backend
    fake: Any

    def put(self, hashes: list[str]) -> None:
        if isinstance(self.fake, FakeLMCacheServer):
            self.fake.put(hashes, (CPU, DISK))
        else:
            keys = {(h, MODEL, _rank(2, r), 0, "") for h in hashes for r in range(2)}
            self.fake.l1 |= keys
            self.fake.l2 |= keys

    def tiers(self, h: str) -> set[str]:
        if isinstance(self.fake, FakeLMCacheServer):
            names = {CPU: "ddr", DISK: "disk"}
            return {names[t] for t in self.fake.tiers.get(h, [])}
        ranks = {(h, MODEL, _rank(2, r), 0, "") for r in range(2)}
        out = set()
        if ranks <= self.fake.l1:
            out.add("ddr")
        if ranks <= self.fake.l2:
            out.add("disk")
        return out


@pytest.fixture(params=["lmcache", "lmcache_mp"])
async def rig(request) -> AsyncIterator[Rig]:
    if request.param == "lmcache":
        async with FakeLMCacheServer() as fake:
            backend: Backend = LMCacheBackend(fake.url, timeout=2.0)
            yield Rig(backend, fake)
            await backend.close()
    else:
        async with FakeLMCacheMPServer() as fake:
            backend = LMCacheMPBackend(fake.url, MODEL, world_size=2, timeout=2.0)
            await backend.start()
            yield Rig(backend, fake)
            await backend.close()


async def test_demote_keeps_disk_delete_drops_every_tier(rig):
    rig.put(HASHES)
    assert (await rig.backend.evict(HASHES[:2], EvictMode.DEMOTE)).ok
    assert [rig.tiers(h) for h in HASHES[:2]] == [{"disk"}, {"disk"}]
    assert rig.tiers(HASHES[2]) == {"ddr", "disk"}
    assert (await rig.backend.evict(HASHES[1:], EvictMode.DELETE)).ok
    assert [rig.tiers(h) for h in HASHES] == [{"disk"}, set(), set()]


async def test_empty_lists_succeed_without_a_call(rig):
    before = len(rig.fake.requests)
    assert (await rig.backend.evict([], EvictMode.DELETE)).ok
    assert (await rig.backend.prefetch([], "t")).ok
    res, locs = await rig.backend.query([])
    assert res.ok and locs.locations == {}
    assert len(rig.fake.requests) == before


async def test_a_dead_cache_is_a_result_not_an_exception(rig):
    await rig.fake.__aexit__(None, None, None)  # the port closes
    res = await rig.backend.evict(HASHES, EvictMode.DELETE)
    assert not res.ok and res.status == 0 and res.detail
    res = await rig.backend.prefetch(HASHES, "t")
    assert not res.ok


async def test_keeps_and_cancels_only_where_the_cache_knows_them(rig):
    res = await rig.backend.cancel_prefetch("prefetch_s:1")
    if rig.backend.takes_keeps:  # ascend_ext's memory API: both routes exist
        assert res.ok
    else:  # the stock server: the port's defaults, a 404 each, nothing sent
        before = len(rig.fake.requests)
        assert not res.ok and res.status == 404
        assert not (await rig.backend.keep(HASHES, 1)).ok
        assert len(rig.fake.requests) == before
