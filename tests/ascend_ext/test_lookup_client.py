"""The hash-caching async lookup client against a real CPU LMCacheEngine over ZMQ."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from support.reliability import wait_for

from ascend_ext.hashing import chain_hashes_hex

pytestmark = pytest.mark.lmcache
pytest.importorskip("lmcache")

HANG_GUARD_S = 120.0  # a hang fails the test; nothing here is timed


def _wait_result(client: Any, lookup_id: str, timeout: float = HANG_GUARD_S) -> int:
    """Poll lookup_cache as vLLM's scheduler does until the workers answered."""
    seen: list[Any] = [None]

    def answered() -> bool:
        seen[0] = client.lookup_cache(lookup_id)
        return seen[0] is not None and seen[0] != -1

    assert wait_for(answered, timeout, every=0.02), f"no lookup answer for {lookup_id}"
    return int(seen[0])


def _stored(engine: Any, tokens: list[int]) -> None:
    """Until the engine holds every chunk of ``tokens`` (a condition, not a pause)."""
    assert wait_for(lambda: engine.lookup(tokens=tokens) == len(tokens), every=0.02), (
        "the engine never held what it stored"
    )


def _lookup(client: Any, tokens: list[int], lookup_id: str) -> int:
    """vLLM's order: lookup_cache (-1: first time), lookup, then poll for the hit count."""
    assert client.lookup_cache(lookup_id) == -1
    assert client.lookup(tokens, lookup_id=lookup_id) is None
    return _wait_result(client, lookup_id)


@pytest.fixture
def engine_and_client(blake3_engine_factory):
    from lmcache.v1.lookup_client.factory import LookupClientFactory

    engine, md, cfg = blake3_engine_factory()
    client = LookupClientFactory.create_lookup_client(cfg, md)
    yield engine, client
    client.close()


def test_factory_builds_an_upgraded_client(engine_and_client) -> None:
    from ascend_ext.lookup_client import RamAKVAsyncLookupClient

    _, client = engine_and_client
    assert isinstance(client, RamAKVAsyncLookupClient)


def test_lookup_caches_hashes_and_get_pops_them(engine_and_client) -> None:
    engine, client = engine_and_client
    toks = list(range(40))
    engine.store(tokens=toks)
    _stored(engine, toks)
    # The real lookup server answers over ZMQ with the hit count of the blake3 keys.
    assert _lookup(client, toks, "req-1") == 40
    assert client.get_cached_hashes("req-1") == chain_hashes_hex(toks, 16)
    assert client.get_cached_hashes("req-1") is None  # popped: no leak
    assert client.get_cached_hashes("never") is None


def test_miss_still_caches_hashes(engine_and_client) -> None:
    _, client = engine_and_client
    toks = list(range(100, 150))
    assert _lookup(client, toks, "req-miss") == 0
    assert client.get_cached_hashes("req-miss") == chain_hashes_hex(toks, 16)


def test_clear_lookup_status_keeps_hashes(engine_and_client) -> None:
    _, client = engine_and_client
    toks = list(range(20))
    _lookup(client, toks, "req-2")
    client.clear_lookup_status("req-2")  # what update_state_after_alloc does
    assert client.lookup_cache("req-2") == -1  # status gone...
    assert client.get_cached_hashes("req-2") == chain_hashes_hex(toks, 16)  # ...hashes kept


def test_relookup_replaces_hashes_and_empty_prompt(engine_and_client) -> None:
    _, client = engine_and_client
    client.lookup(list(range(20)), lookup_id="req-3")
    client.lookup(list(range(50)), lookup_id="req-3")  # preemption: all_token_ids grew
    assert client.get_cached_hashes("req-3") == chain_hashes_hex(list(range(50)), 16)
    client.lookup([], lookup_id="req-empty")
    assert client.get_cached_hashes("req-empty") == []


def test_direct_construction_is_refused(blake3_engine_factory) -> None:
    from ascend_ext.lookup_client import RamAKVAsyncLookupClient

    _, md, cfg = blake3_engine_factory()
    with pytest.raises(TypeError, match="from_existing"):
        RamAKVAsyncLookupClient(cfg, md)


def test_from_existing_through_a_real_decorator_chain(blake3_engine_factory) -> None:
    from lmcache.v1.lookup_client.chunk_statistics_lookup_client import (
        ChunkStatisticsLookupClient,
    )
    from lmcache.v1.lookup_client.hit_limit_lookup_client import HitLimitLookupClient
    from lmcache.v1.lookup_client.lmcache_async_lookup_client import LMCacheAsyncLookupClient

    from ascend_ext.lookup_client import RamAKVAsyncLookupClient

    engine, md, cfg = blake3_engine_factory(hit_miss_ratio=0.5, enable_chunk_statistics=True)
    plain = LMCacheAsyncLookupClient(cfg, md)  # built as lmcache builds it, not upgraded
    chain = ChunkStatisticsLookupClient(HitLimitLookupClient(plain, cfg), cfg, md)
    sockets, thread = (plain.pull_socket, list(plain.push_sockets)), plain.thread
    try:
        up = RamAKVAsyncLookupClient.from_existing(chain, md)
        assert up is plain and type(plain) is RamAKVAsyncLookupClient
        assert (plain.pull_socket, plain.push_sockets) == sockets  # same ZMQ sockets
        assert plain.thread is thread and thread.is_alive()  # same response thread
        assert RamAKVAsyncLookupClient.from_existing(chain) is up  # idempotent
        toks = list(range(64))
        engine.store(tokens=toks)
        _stored(engine, toks)
        assert chain.lookup_cache("req-c") == -1
        chain.lookup(toks, "req-c")
        hits = _wait_result(chain, "req-c")
        # HitLimit only caps lookup()'s synchronous answer, which is None for the async
        # client: the real hit count comes back through the chain unchanged.
        assert hits == 64
        assert up.get_cached_hashes("req-c") == chain_hashes_hex(toks, 16)
    finally:
        chain.close()


def test_from_existing_rejects_other_clients() -> None:
    from ascend_ext.lookup_client import RamAKVAsyncLookupClient

    class Other:
        pass

    with pytest.raises(TypeError):
        RamAKVAsyncLookupClient.from_existing(Other())


def test_factory_upgrades_inside_decorators(blake3_engine_factory) -> None:
    from lmcache.v1.lookup_client.factory import LookupClientFactory

    from ascend_ext.lookup_client import RamAKVAsyncLookupClient, unwrap_lookup_client

    _, md, cfg = blake3_engine_factory(hit_miss_ratio=0.0)
    client = LookupClientFactory.create_lookup_client(cfg, md)
    try:
        assert type(client).__name__ == "HitLimitLookupClient"
        assert isinstance(unwrap_lookup_client(client), RamAKVAsyncLookupClient)
    finally:
        client.close()


def test_cache_is_bounded_and_counted(blake3_engine_factory) -> None:
    from lmcache.v1.lookup_client.factory import LookupClientFactory

    from ascend_ext import hash_metrics

    _, md, cfg = blake3_engine_factory(extra_config={"ramakv.hash_cache_max_entries": 3})
    client = LookupClientFactory.create_lookup_client(cfg, md)
    counter = hash_metrics.HASHES_DROPPED.labels(reason="capacity")
    before = counter._value.get()
    try:
        for i in range(10):  # aborted requests never reach request_finished
            client.lookup(list(range(i, i + 20)), lookup_id=f"abort-{i}")
        assert len(client.hash_cache) == 3
        assert client.hash_cache.capped == 7
        assert counter._value.get() - before == 7
        assert client.get_cached_hashes("abort-0") is None
        assert client.get_cached_hashes("abort-9") == chain_hashes_hex(list(range(9, 29)), 16)
    finally:
        client.close()
    assert len(client.hash_cache) == 0  # close forgets everything


def test_concurrent_lookups_and_pops(engine_and_client) -> None:
    _, client = engine_and_client
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(20):
                lid = f"t{n}-{i}"
                client.lookup(list(range(i, i + 17)), lookup_id=lid)
                assert client.get_cached_hashes(lid) == chain_hashes_hex(list(range(i, i + 17)), 16)
        except BaseException as e:  # noqa: BLE001 - surfaced below
            errors.append(e)

    client.lookup_backoff_time = 0.0  # lmcache sleeps 10 ms per lookup by default
    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(client.hash_cache) == 0


def test_teardown_with_lookups_in_flight(blake3_engine_factory) -> None:
    """Lookups still being answered at shutdown: the engine's event loop sends through the
    server's socket, so it must be stopped before that socket is closed (else libzmq can
    abort the process). Proven by the fixture's shutdown, which also runs here."""
    from lmcache.v1.lookup_client.factory import LookupClientFactory

    from ascend_ext.lookup_client import shutdown_engine_and_lookup_server

    engine, md, cfg = blake3_engine_factory()
    toks = list(range(64))
    engine.store(tokens=toks)
    client = LookupClientFactory.create_lookup_client(cfg, md)
    client.lookup_backoff_time = 0.0
    for i in range(200):
        client.lookup(toks, lookup_id=f"burst-{i}")
    client.close()
    assert not client.thread.is_alive() and client.pull_socket.closed
    # Shut down here (the fixture's second call is then a no-op).
    server = engine.storage_manager.async_lookup_server
    assert shutdown_engine_and_lookup_server(md.engine_id, server, md)
    assert server.pull_socket.closed and server.push_socket.closed
    assert not engine.storage_manager.thread.is_alive()
