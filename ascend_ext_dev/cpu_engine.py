"""Build a real two-tier LMCache 0.5.6 engine on CPU (DDR LocalCPUBackend + LocalDiskBackend)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

# lmcache phones home on import unless told not to; keep tests and dev runs offline.
os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """What the dev engine looks like; the KV shape is small so chunks are cheap."""

    disk_dir: str
    ddr_mb: float = 64.0
    disk_mb: float = 1024.0
    chunk_size: int = 16
    num_layers: int = 2
    num_heads: int = 2
    head_size: int = 8
    model_name: str = "ramakv-dev"
    world_size: int = 1
    worker_id: int = 0
    instance_id: str = "ramakv-dev"
    #: lmcache's ``pre_caching_hash_algorithm``; "blake3" is ascend_ext.hashing's chain hash,
    #: identical in every process whatever PYTHONHASHSEED ("builtin" is Python's hash()).
    hash_algorithm: str = "blake3"


def build_engine(spec: EngineSpec) -> Any:
    """An LMCacheEngine (post_init'ed) with a mock GPU connector; storage holds real bytes."""
    import torch
    from lmcache.v1.cache_engine import LMCacheEngineBuilder
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.gpu_connector.mock_gpu_connector import MockGPUConnector
    from lmcache.v1.metadata import LMCacheMetadata

    from ascend_ext.installer import register_blake3

    register_blake3()  # before the engine builds its token database
    os.makedirs(spec.disk_dir, exist_ok=True)
    config = LMCacheEngineConfig.from_defaults(
        chunk_size=spec.chunk_size,
        local_cpu=True,
        max_local_cpu_size=spec.ddr_mb / 1024,  # lmcache sizes are in GB
        local_disk=spec.disk_dir,
        max_local_disk_size=spec.disk_mb / 1024,
        lmcache_instance_id=spec.instance_id,
        pre_caching_hash_algorithm=spec.hash_algorithm,
    )
    shape = (spec.num_layers, 2, spec.chunk_size, spec.num_heads, spec.head_size)
    metadata = LMCacheMetadata(
        model_name=spec.model_name,
        world_size=spec.world_size,
        local_world_size=spec.world_size,
        worker_id=spec.worker_id,
        local_worker_id=spec.worker_id,
        kv_dtype=torch.float16,
        kv_shape=shape,
        role="worker",
    )
    engine = LMCacheEngineBuilder.get_or_create(
        spec.instance_id,
        config,
        metadata,
        MockGPUConnector(shape),
        lambda *a, **k: None,
        lambda *a, **k: None,
    )
    engine.post_init()
    return engine


def destroy_engine(spec_or_id: EngineSpec | str) -> None:
    """Close an engine built here (threads, files) so a test can build the next one."""
    from lmcache.v1.cache_engine import LMCacheEngineBuilder

    instance_id = spec_or_id if isinstance(spec_or_id, str) else spec_or_id.instance_id
    LMCacheEngineBuilder.destroy(instance_id)


def chunk_shape(engine: Any) -> tuple[int, ...]:
    """The KV shape of one full chunk."""
    return tuple(engine.metadata.kv_shape)
