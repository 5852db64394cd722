"""ascend_ext fixtures: a real CPU LMCacheEngine with the blake3 token database (chunk hashes)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

KV_SHAPE = (2, 2, 16, 2, 8)  # layers, k/v, chunk tokens, heads, head size: tiny real tensors


@pytest.fixture
def blake3_engine_factory() -> Iterator[Callable[..., tuple[Any, Any, Any]]]:
    """Build (engine, metadata, config) on CPU with async loading and a lookup server."""
    pytest.importorskip("lmcache")
    import torch
    from lmcache.v1.cache_engine import LMCacheEngineBuilder
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.gpu_connector.mock_gpu_connector import MockGPUConnector
    from lmcache.v1.lookup_client.factory import LookupClientFactory
    from lmcache.v1.metadata import LMCacheMetadata

    from ascend_ext.installer import install

    install(memory_api=False, vllm=False)
    built: list[tuple[str, Any]] = []

    def make(**cfg: Any) -> tuple[Any, Any, Any]:
        opts: dict[str, Any] = dict(
            chunk_size=16,
            local_cpu=True,
            max_local_cpu_size=0.05,
            enable_async_loading=True,
            save_unfull_chunk=True,
            pre_caching_hash_algorithm="blake3",
        )
        opts.update(cfg)
        config = LMCacheEngineConfig.from_defaults(**opts)
        instance = "t-" + uuid.uuid4().hex[:10]
        metadata = LMCacheMetadata(
            model_name="tiny",
            world_size=1,
            local_world_size=1,
            worker_id=0,
            local_worker_id=0,
            kv_dtype=torch.float16,
            kv_shape=KV_SHAPE,
            engine_id=instance,  # unique ZMQ socket paths per test
        )
        engine = LMCacheEngineBuilder.get_or_create(
            instance,
            config,
            metadata,
            MockGPUConnector(KV_SHAPE),
            lambda *a: None,
            lambda *a: None,
        )
        built.append((instance, None, metadata))  # destroyed even if the rest fails
        server = LookupClientFactory.create_lookup_server(engine, metadata)
        built[-1] = (instance, server, metadata)
        engine.post_init(async_lookup_server=server)
        return engine, metadata, config

    yield make
    from ascend_ext.lookup_client import shutdown_engine_and_lookup_server

    # Not server.close() then destroy(): the engine's event loop answers lookups through the
    # server's socket, so closing it first races libzmq ("Fatal Python error: Aborted").
    for instance, server, metadata in reversed(built):
        assert shutdown_engine_and_lookup_server(instance, server, metadata), instance
