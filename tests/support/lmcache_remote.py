"""LMCache's shared remote tier on loopback for the scale-out tests: lmcache 0.5.6's own
server (``python -m lmcache.v1.server``) and real CPU engines whose third tier it is, each
behind the memory API (ascend_ext_dev.devserver's app) as a node's LMCache would be."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from support.daemon_proc import free_port

os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")

SHAPE = (2, 2, 16, 2, 8)  # layers, k/v, chunk tokens, kv heads, head size: tiny real tensors
CHUNK = SHAPE[2]
# A stored chunk as LMCache's connectors hand it over (KV_2LTD: k/v, layers, tokens,
# heads x head size); the remote tier's serde takes at most 4 dimensions.
STORED = (2, SHAPE[0], CHUNK, SHAPE[3] * SHAPE[4])
START_TIMEOUT_S = 120.0


@contextmanager
def remote_server() -> Iterator[str]:
    """lmcache's remote server in a child process on a loopback port; yields its lm:// URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lmcache.v1.server", "127.0.0.1", str(port), "cpu"],
        env=dict(os.environ, LMCACHE_TRACK_USAGE="false"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:  # until it accepts connections (a condition, polled)
            assert proc.poll() is None, "lmcache.v1.server exited at start"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "lmcache.v1.server never listened"
                time.sleep(0.05)
        yield f"lm://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(10)


@contextmanager
def engine_with_remote(disk_dir: Path, remote_url: str) -> Iterator[Any]:
    """A real LMCache engine on CPU: DDR, disk in ``disk_dir``, and the remote tier."""
    import torch
    from lmcache.v1.cache_engine import LMCacheEngineBuilder
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.gpu_connector.mock_gpu_connector import MockGPUConnector
    from lmcache.v1.metadata import LMCacheMetadata

    from ascend_ext.installer import register_blake3
    from ascend_ext.memory_api import forget_engine

    register_blake3()
    instance = "r-" + uuid.uuid4().hex[:10]
    config = LMCacheEngineConfig.from_defaults(
        chunk_size=CHUNK,
        local_cpu=True,
        max_local_cpu_size=0.05,
        local_disk=str(disk_dir),
        max_local_disk_size=0.5,
        remote_url=remote_url,
        remote_serde="naive",
        lmcache_instance_id=instance,
        pre_caching_hash_algorithm="blake3",
    )
    metadata = LMCacheMetadata(
        model_name="ramakv-remote",
        world_size=1,
        local_world_size=1,
        worker_id=0,
        local_worker_id=0,
        kv_dtype=torch.float16,
        kv_shape=SHAPE,
        chunk_size=CHUNK,
        role="worker",
    )
    engine = LMCacheEngineBuilder.get_or_create(
        instance,
        config,
        metadata,
        MockGPUConnector(SHAPE),
        lambda *a, **k: None,
        lambda *a, **k: None,
    )
    engine.post_init()
    try:
        yield engine
    finally:
        forget_engine(engine)
        LMCacheEngineBuilder.destroy(instance)


def store_prompt(engine: Any, n_tokens: int, fill: float) -> list[str]:
    """Store a prompt's chunks as the engine's connector would after a prefill (DDR, disk
    and the remote tier, asynchronously); their hashes, as LMCache reports them."""
    import torch
    from lmcache.v1.memory_management import MemoryFormat

    from ascend_ext.memory_api import ops_for
    from ascend_ext_dev.dev_turn import hex_hash

    sm = ops_for(engine).sm
    keys, objs, hashes = [], [], []
    for _s, _e, key in engine.token_database.process_tokens(torch.arange(n_tokens)):
        obj = sm.allocate(
            torch.Size(STORED), torch.float16, fmt=MemoryFormat.KV_2LTD, busy_loop=False
        )
        assert obj is not None, "DDR full"
        obj.tensor.fill_(fill)
        keys.append(key)
        objs.append(obj)
        hashes.append(hex_hash(key.chunk_hash))
    sm.batched_put(keys, objs)  # consumes our references
    return hashes
