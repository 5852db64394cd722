"""lmcache 0.5.6 disk-tier fixes: lookup pins released after the prefetch; deletes free space.

On a real two-tier lmcache engine: the storage manager's own async lookup-and-prefetch path
(as vLLM's async lookups drive it) hits a chunk on disk; afterwards the chunk must be
evictable again. Without ascend_ext's fix its pin count stays at 1 for good.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from support.memapi_rig import cpu_engine, tokens

pytestmark = pytest.mark.lmcache
pytest.importorskip("lmcache")

from ascend_ext.lmcache_fixes import DISK_PIN_LEAK_VERSIONS, lmcache_version  # noqa: E402
from ascend_ext.memory_ops import CPU, DISK, MemoryOps  # noqa: E402
from ascend_ext_dev.dev_turn import run_turn  # noqa: E402


def _on_disk(disk, keys, timeout: float = 60.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not all(disk.contains(k) for k in keys):
        assert time.monotonic() < deadline, "disk writes did not land"
        time.sleep(0.02)


def test_a_disk_hit_leaves_the_chunk_evictable(tmp_path: Path) -> None:
    if lmcache_version() not in DISK_PIN_LEAK_VERSIONS:
        pytest.skip(f"lmcache {lmcache_version()} is not known to leak disk pins")
    import ascend_ext

    assert ascend_ext.install()["async_disk_pin_release_fix"] is True
    with cpu_engine(tmp_path / "disk", ddr_mb=4) as engine:
        ops = MemoryOps(engine)
        try:
            hashes = run_turn(ops, tokens(2))["kv_transfer_params"]["chunk_hashes"]
            keys = [ops.key_for(h) for h in hashes]
            sm = engine.storage_manager
            disk = sm.storage_backends[DISK]
            _on_disk(disk, keys)
            ops.evict(hashes, [CPU])  # only on disk now: the lookup must hit there

            async def lookup_and_load() -> int:
                hits = await disk.batched_async_contains("lookup-1", keys, True)
                assert all(disk.dict[k].pin_count == 1 for k in keys)  # the lookup's pin
                objs = await disk.batched_get_non_blocking("lookup-1", keys[:hits])
                for obj in objs:  # what retrieve() does with prefetched objects
                    obj.unpin()
                    obj.ref_count_down()
                return hits

            hits = asyncio.run_coroutine_threadsafe(lookup_and_load(), sm.loop).result(30)
            assert hits == len(keys)
            assert [disk.dict[k].pin_count for k in keys] == [0, 0]
            assert all(disk.dict[k].can_evict for k in keys)
        finally:
            ops.close()


def test_deleting_chunks_gives_their_disk_space_back(tmp_path: Path) -> None:
    """lmcache 0.5.6's remove(force=True) (the memory API's evict) kept the bytes counted:
    the daemon's deletes shrank the disk tier until nothing more could be stored."""
    import ascend_ext

    assert ascend_ext.install()["disk_remove_size_fix"] is True
    with cpu_engine(tmp_path / "disk", ddr_mb=4) as engine:
        ops = MemoryOps(engine)
        try:
            hashes = run_turn(ops, tokens(3))["kv_transfer_params"]["chunk_hashes"]
            disk = engine.storage_manager.storage_backends[DISK]
            _on_disk(disk, [ops.key_for(h) for h in hashes])
            assert disk.current_cache_size > 0
            assert ops.evict(hashes, None) == 2 * len(hashes)  # DDR and disk copies
            assert disk.current_cache_size == 0 and not disk.dict
        finally:
            ops.close()
