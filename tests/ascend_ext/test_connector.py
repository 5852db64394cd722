"""request_finished's chunk_hashes with lmcache's real lookup client and token database."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from ascend_ext import hash_metrics
from ascend_ext.connector import (
    add_chunk_hashes,
    prompt_chunk_hashes,
    token_database_of,
    wrap_request_finished,
)
from ascend_ext.hashing import chain_hashes_hex

pytestmark = pytest.mark.lmcache
pytest.importorskip("lmcache")


@dataclass
class Req:
    """The fields of vllm.v1.request.Request that request_finished reads."""

    request_id: str
    prompt_token_ids: list[int] | None
    output: list[int] = field(default_factory=list)

    @property
    def all_token_ids(self) -> list[int]:
        return (self.prompt_token_ids or []) + self.output


def _count(source: str) -> float:
    return hash_metrics.REQUEST_FINISHED.labels(source=source)._value.get()


@pytest.fixture
def client_and_db(blake3_engine_factory):
    from lmcache.v1.lookup_client.factory import LookupClientFactory

    _, md, cfg = blake3_engine_factory(hit_miss_ratio=0.0)  # a decorated chain, as in vLLM
    client = LookupClientFactory.create_lookup_client(cfg, md)
    client.actual_lookup_client.lookup_backoff_time = 0.0
    yield client, client.actual_lookup_client.token_database
    client.close()


def test_cache_hit_pops_the_lookup_hashes(client_and_db) -> None:
    client, db = client_and_db
    prompt = list(range(40))
    client.lookup(prompt, lookup_id="r1")
    before = _count("cache")
    req = Req("r1", prompt, output=[7, 8, 9])
    assert prompt_chunk_hashes(client, db, req) == chain_hashes_hex(prompt, 16)
    assert _count("cache") == before + 1
    assert client.actual_lookup_client.get_cached_hashes("r1") is None  # popped


def test_fallback_recomputes_prompt_tokens_only(client_and_db) -> None:
    client, db = client_and_db
    prompt = list(range(35))
    before = _count("recompute")
    req = Req("never-looked-up", prompt, output=list(range(500, 600)))
    assert prompt_chunk_hashes(client, db, req) == chain_hashes_hex(prompt, 16)
    assert _count("recompute") == before + 1


def test_fallback_without_lookup_client(client_and_db) -> None:
    _, db = client_and_db
    assert prompt_chunk_hashes(None, db, Req("x", list(range(20)))) == chain_hashes_hex(
        list(range(20)), 16
    )


def test_short_and_empty_prompts_give_an_empty_list_and_still_pop(client_and_db) -> None:
    """Under one chunk the answer is an explicit [] (the host empties the map), never absent."""
    client, db = client_and_db
    client.lookup(list(range(20)), lookup_id="r-empty")
    assert prompt_chunk_hashes(client, db, Req("r-empty", [])) == []
    assert "r-empty" not in client.actual_lookup_client.hash_cache
    assert add_chunk_hashes(client, db, Req("r-empty", None), None) == {"chunk_hashes": []}
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.token_database import ChunkedTokenDatabase

    # lmcache's default save_unfull_chunk=false: a prompt under one chunk has no chunk.
    full_only = ChunkedTokenDatabase(
        LMCacheEngineConfig.from_defaults(chunk_size=16, pre_caching_hash_algorithm="blake3"), None
    )
    assert add_chunk_hashes(None, full_only, Req("r-short", [1, 2, 3]), {"a": 1}) == {
        "a": 1,
        "chunk_hashes": [],
    }


def test_no_token_database_leaves_the_list_out() -> None:
    """Without a database nothing can be hashed: absent (an engine fault the host reports)."""
    assert add_chunk_hashes(None, None, Req("r", list(range(40))), {"a": 1}) == {"a": 1}


def test_add_chunk_hashes_merges_into_existing_params(client_and_db) -> None:
    client, db = client_and_db
    prompt = list(range(16))
    params = {"first_tok": 3}
    out = add_chunk_hashes(client, db, Req("r2", prompt), params)
    assert out == {"first_tok": 3, "chunk_hashes": chain_hashes_hex(prompt, 16)}
    assert params == {"first_tok": 3}  # the caller's dict is not mutated


def test_hashing_error_never_fails_the_request() -> None:
    class BrokenDb:
        def process_tokens(self, **_: Any) -> Any:
            raise RuntimeError("boom")

    assert add_chunk_hashes(None, BrokenDb(), Req("r", [1, 2]), {"k": 1}) == {"k": 1}


class _Engine:
    def __init__(self, db: Any) -> None:
        self.token_database = db


class FakeImpl:
    """Stands in for LMCacheConnectorV1Impl, whose module needs vLLM (not installable here)."""

    def __init__(self, lookup_client: Any, engine: Any = None) -> None:
        self.lookup_client = lookup_client
        self.lmcache_engine = engine

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, Any]:
        return False, None


def test_wrapped_request_finished_returns_chunk_hashes(client_and_db) -> None:
    client, db = client_and_db
    wrapped = wrap_request_finished(FakeImpl.request_finished)
    assert wrap_request_finished(wrapped) is wrapped  # idempotent
    impl = FakeImpl(client)  # scheduler role: no engine, the lookup client's database
    assert token_database_of(impl) is db
    prompt = list(range(50))
    client.lookup(prompt, lookup_id="r3")
    delay, params = wrapped(impl, Req("r3", prompt, output=[1]), [0, 1])
    assert delay is False
    assert params == {"chunk_hashes": chain_hashes_hex(prompt, 16)}
    # Second call for the same id: cache is empty, recompute gives the same answer.
    assert wrapped(impl, Req("r3", prompt), [])[1] == params


def test_wrapped_request_finished_upgrades_a_late_client(blake3_engine_factory) -> None:
    """install() after the connector was built: the first request finishing upgrades it."""
    from lmcache.v1.lookup_client.lmcache_async_lookup_client import LMCacheAsyncLookupClient

    from ascend_ext.lookup_client import RamAKVAsyncLookupClient

    engine, md, cfg = blake3_engine_factory()
    plain = LMCacheAsyncLookupClient(cfg, md)
    try:
        impl = FakeImpl(plain, engine)
        assert token_database_of(impl) is engine.token_database
        wrapped = wrap_request_finished(FakeImpl.request_finished)
        prompt = list(range(20))
        _, params = wrapped(impl, Req("r4", prompt), [])
        assert params == {"chunk_hashes": chain_hashes_hex(prompt, 16)}
        assert isinstance(plain, RamAKVAsyncLookupClient)
    finally:
        RamAKVAsyncLookupClient.from_existing(plain, md)
        plain.close()
