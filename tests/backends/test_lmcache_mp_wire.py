"""LMCacheMPBackend against the stock-server stand-in: keys per rank, tiers, the token
prefetch and its poll, the start-up probe naming missing routes."""

from __future__ import annotations

import logging

import pytest
from support.lmcache_mp_server import PROBED_CAPS, FakeLMCacheMPServer, _rank

from ramakv_daemon.adapters.backends.lmcache_mp import LMCacheMPBackend, kv_rank
from ramakv_daemon.ports import EvictMode
from ramakv_proxy.stock_keys import chunk_hashes

MODEL = "tiny/llama"
TOKENS = list(range(1000, 1000 + 600))  # two complete chunks of 256 and a tail


@pytest.fixture
async def fake():
    async with FakeLMCacheMPServer() as f:
        yield f


def test_kv_rank_is_lmcaches():
    assert kv_rank(1, 0) == 16777472  # (1<<24)|(0<<16)|(1<<8)|0
    assert kv_rank(4, 3) == (4 << 24) | (3 << 16) | (4 << 8) | 3


async def test_evict_sends_one_key_per_rank_and_the_mode_picks_the_tier(fake):
    b = LMCacheMPBackend(fake.url, MODEL, world_size=2, cache_salt="t1")
    try:
        await b.evict(["ab"], EvictMode.DEMOTE)
        await b.evict(["cd"], EvictMode.DELETE)
    finally:
        await b.close()
    keys = [
        {
            "chunk_hash_hex": h,
            "model_name": MODEL,
            "kv_rank": _rank(2, r),
            "object_group_id": 0,
            "cache_salt": "t1",
        }
        for h in ("ab", "cd")
        for r in range(2)
    ]
    sent = fake.calls("DELETE", "/cache/objects")[1:]  # the first is the start-up probe
    assert sent == [{"keys": keys[:2], "tier": "l1"}, {"keys": keys[2:], "tier": "all"}]


async def test_a_bad_hash_is_the_servers_400_and_nothing_changes(fake):
    fake.store(TOKENS, MODEL)
    before = (set(fake.l1), set(fake.l2))
    b = LMCacheMPBackend(fake.url, MODEL)
    res = await b.evict(["not-hex"], EvictMode.DELETE)
    await b.close()
    assert not res.ok and res.status == 400 and "keys[0]" in res.detail
    assert (fake.l1, fake.l2) == before


async def test_prefetch_tokens_polls_until_completed_and_the_chunks_are_in_l1(fake):
    fake.register(MODEL)
    fake.store(TOKENS, MODEL)
    b = LMCacheMPBackend(fake.url, MODEL)
    hashes = chunk_hashes(TOKENS, 256)
    assert len(hashes) == 2
    assert (await b.evict(hashes, EvictMode.DEMOTE)).ok
    assert fake.l1 == set()
    fake.pending_polls = 3
    res = await b.prefetch_tokens(TOKENS)
    await b.close()
    assert res.ok and res.body["status"] == "completed"
    assert (res.body["found_keys"], res.body["total_keys"]) == (2, 2)
    assert fake.l1 == fake.keys_of(TOKENS, MODEL)
    polls = [p for m, p, _ in fake.requests if p.startswith("/cache/prefetches/warm")]
    assert len(polls) == 4  # three pending, one completed (which consumed the id)


async def test_prefetch_before_an_engine_registered_is_a_503(fake):
    b = LMCacheMPBackend(fake.url, MODEL)
    res = await b.prefetch_tokens(TOKENS)
    await b.close()
    assert not res.ok and res.status == 503 and "no layout registered" in res.detail


async def test_hash_prefetch_and_query_say_what_the_stock_server_lacks(fake):
    b = LMCacheMPBackend(fake.url, MODEL)
    res = await b.prefetch(["ab"], "prefetch_s:1")
    assert not res.ok and res.status == 501 and "token ids" in res.detail
    res, locs = await b.query(["ab"])
    assert not res.ok and locs.locations == {}
    await b.close()


async def test_the_probe_reads_capabilities(fake):
    b = LMCacheMPBackend(fake.url, MODEL)
    caps = await b.start()
    await b.close()
    assert caps.as_dict() == PROBED_CAPS


async def test_a_missing_route_is_named_at_start_and_in_each_refused_call(fake, caplog):
    caplog.set_level(logging.ERROR, logger="ramakv.backend")
    fake.drop_routes = {"/cache/objects", "/cache/prefetches/{id}"}
    b = LMCacheMPBackend(fake.url, MODEL)
    caps = await b.start()
    assert caps.missing == ["/cache/objects", "/cache/prefetches/{id}"]
    assert "routes missing: /cache/objects, /cache/prefetches/{id}" in caplog.text
    res = await b.evict(["ab"], EvictMode.DEMOTE)
    assert not res.ok and res.status == 404 and "no /cache/objects route" in res.detail
    await b.close()


async def test_a_server_down_at_start_is_probed_on_the_next_call(fake):
    b = LMCacheMPBackend("http://127.0.0.1:9", MODEL, timeout=1.0)
    caps = await b.start()
    assert not caps.probed and "unreachable" in caps.problem
    await b.close()
    b = LMCacheMPBackend(fake.url, MODEL)  # never probed: its first call probes first
    assert (await b.evict(["ab"], EvictMode.DEMOTE)).ok
    assert b.capabilities.probed and b.capabilities.healthy
    await b.close()


def test_model_name_is_required():
    with pytest.raises(ValueError, match="model_name"):
        LMCacheMPBackend("http://127.0.0.1:1", "")
