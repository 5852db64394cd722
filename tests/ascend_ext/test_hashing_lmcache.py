"""lmcache 0.5.6's token database with pre_caching_hash_algorithm=blake3 uses ascend_ext.hashing."""

from __future__ import annotations

import pytest
from support.reliability import wait_for

from ascend_ext.hashing import chain_hashes, chain_hashes_hex, from_hex, lmcache_hash_func

pytestmark = pytest.mark.lmcache
pytest.importorskip("lmcache")


def _db(chunk_size: int = 16, save_unfull_chunk: bool = True, algo: str = "blake3"):
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.token_database import ChunkedTokenDatabase

    from ascend_ext.installer import register_blake3

    register_blake3()
    cfg = LMCacheEngineConfig.from_defaults(
        chunk_size=chunk_size,
        save_unfull_chunk=save_unfull_chunk,
        pre_caching_hash_algorithm=algo,
    )
    return ChunkedTokenDatabase(cfg, None)


def _hashes(db, tokens) -> list[int]:
    return [h for _, _, h in db.process_tokens(tokens=tokens, make_key=False)]


def test_token_database_uses_blake3_chain() -> None:
    db = _db()
    assert db.hash_func is lmcache_hash_func
    toks = list(range(70))
    assert _hashes(db, toks) == chain_hashes(toks, 16)


def test_torch_tensor_tokens_hash_the_same() -> None:
    import torch

    toks = list(range(50))
    assert _hashes(_db(), torch.tensor(toks)) == chain_hashes(toks, 16)


def test_save_unfull_chunk_setting_is_followed() -> None:
    toks = list(range(40))
    assert _hashes(_db(save_unfull_chunk=False), toks) == chain_hashes(toks, 16, False)
    assert len(_hashes(_db(save_unfull_chunk=False), toks)) == 2
    assert len(_hashes(_db(save_unfull_chunk=True), toks)) == 3


def test_first_prefix_is_zero_even_if_lmcache_none_hash_changed(monkeypatch) -> None:
    """With vLLM, lmcache sets NONE_HASH from vLLM's (possibly random) none hash."""
    from lmcache.v1 import token_database as tdb

    db, builtin = _db(), _db(algo="builtin")  # constructing resets NONE_HASH without vLLM
    monkeypatch.setattr(tdb, "NONE_HASH", 123456789)
    assert _hashes(db, list(range(20))) == chain_hashes(list(range(20)), 16)
    # Other algorithms keep lmcache's behaviour.
    assert builtin._get_init_hash() == 123456789


def test_agrees_with_lmcache_mp_blake3_on_the_digest() -> None:
    """lmcache's own multiprocess blake3 hashes the same bytes (it keeps the full digest)."""
    pytest.importorskip("numba")
    from lmcache.v1.multiprocess.token_hasher import _make_blake3_hash_func

    theirs = _make_blake3_hash_func()
    prev = 0
    toks = list(range(64))
    for i, h in enumerate(chain_hashes(toks, 16)):
        digest = theirs((prev, tuple(toks[i * 16 : (i + 1) * 16]), None))
        assert int.from_bytes(digest[:8], "big", signed=True) == h
        prev = h


def test_engine_stores_under_the_hashes_the_host_gets(blake3_engine_factory) -> None:
    from lmcache.utils import CacheEngineKey

    engine, md, _ = blake3_engine_factory()
    toks = list(range(40))
    engine.store(tokens=toks)
    hex_hashes = chain_hashes_hex(toks, 16)
    keys = [
        CacheEngineKey(md.model_name, md.world_size, md.worker_id, from_hex(h), md.kv_dtype)
        for h in hex_hashes
    ]
    sm = engine.storage_manager
    assert wait_for(lambda: all(sm.contains(k) for k in keys))
    # And through the memory API's query, the path the daemon uses.
    try:
        from ascend_ext.memory_ops import MemoryOps
    except ImportError:
        return
    ops = MemoryOps(engine)
    try:
        where = ops.query(hex_hashes)
    finally:
        ops.close()
    assert all(where[h] for h in hex_hashes), where
