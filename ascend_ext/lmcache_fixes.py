"""install()'s repairs of lmcache: a KV copy for vLLM's CPU worker, the async double release."""

from __future__ import annotations

import functools
import logging
from importlib import metadata
from typing import Any

from ascend_ext.patch_mark import is_patched, mark_patched

log = logging.getLogger("ascend_ext.install")

#: lmcache releases whose async-loading retrieve leaves its LOADING event registered, so the
#: later lookup_unpin releases the same memory objects a second time (upstream LMCache issue
#: #3381 / PR #2772). Add a release here only after checking its cache_engine.py.
DOUBLE_RELEASE_VERSIONS = frozenset({"0.5.6"})

#: Devices lmcache 0.5.6 has vLLM connectors for; anything else (vLLM's CPU worker) gets ours.
_LMCACHE_DEVICES = frozenset({"cuda", "xpu", "musa", "hpu"})


def lmcache_version() -> str:
    """The installed lmcache distribution's version ("" when unknown)."""
    try:
        return metadata.version("lmcache")
    except metadata.PackageNotFoundError:
        return ""


def patch_cpu_kv_connector() -> bool:
    """Make lmcache's CreateGPUConnector build ascend_ext's CPU KV copy for vLLM on CPU.

    True when installed (the device is one lmcache has no vLLM connector for); False where
    lmcache brings its own (CUDA, XPU, MUSA, HPU), which is then left alone.
    """
    from lmcache import torch_device_type
    from lmcache.v1 import gpu_connector as gc

    if torch_device_type in _LMCACHE_DEVICES:
        return False
    orig = gc.CreateGPUConnector
    if is_patched(orig):
        return True

    @functools.wraps(orig)
    def create_gpu_connector(config: Any, md: Any, engine: Any, *args: Any, **kw: Any) -> Any:
        from lmcache.utils import EngineType

        if engine != EngineType.VLLM:
            return orig(config, md, engine, *args, **kw)
        from ascend_ext.cpu_kv import VLLMCpuKVConnector

        if config.use_layerwise or config.enable_blending:
            raise ValueError(
                "ascend_ext's CPU KV connector copies whole chunks: set use_layerwise and "
                "enable_blending to false on vLLM's CPU backend"
            )
        connector = VLLMCpuKVConnector.from_metadata(md)  # MLA raises a clear ValueError
        log.warning(
            "ascend_ext: lmcache has no vLLM connector for this device; using "
            "ascend_ext's CPU KV copy (%d layers, %d kv heads, head size %d)",
            connector.num_layers,
            connector.num_kv_heads,
            connector.head_size,
        )
        return connector

    mark_patched(create_gpu_connector)
    gc.CreateGPUConnector = create_gpu_connector
    return True


def patch_async_double_release() -> bool:
    """Pop the LOADING event once an async retrieve has consumed (and released) its objects.

    lmcache 0.5.6's ``retrieve()`` with ``enable_async_loading`` releases the prefetched
    memory objects but ``EventManager.get_event_future`` leaves the event registered; the
    request's later ``lookup_unpin`` -> ``cleanup_memory_objs`` pops it and releases the same
    objects again, so the hot-cache copy reaches ref 0 while still indexed ("Double free",
    EngineDeadError). True when installed; False on releases without the bug.
    """
    if lmcache_version() not in DOUBLE_RELEASE_VERSIONS:
        return False
    from lmcache.v1.cache_engine import LMCacheEngine
    from lmcache.v1.event_manager import EventStatus, EventType

    orig = LMCacheEngine._async_process_tokens_internal
    if is_patched(orig):
        return True

    @functools.wraps(orig)
    def _async_process_tokens_internal(
        self: Any, tokens: Any, mask: Any, ret_mask: Any, **kwargs: Any
    ) -> Any:
        result = orig(self, tokens, mask, ret_mask, **kwargs)
        # Only after a normal return: the objects were handed to retrieve(), which releases
        # them; the event must not stay behind for cleanup_memory_objs to release again.
        req_id = kwargs.get("req_id")
        events = self.event_manager
        if (
            req_id is not None
            and events.get_event_status(EventType.LOADING, req_id) == EventStatus.DONE
        ):
            events.pop_event(EventType.LOADING, req_id)
        return result

    mark_patched(_async_process_tokens_internal)
    LMCacheEngine._async_process_tokens_internal = _async_process_tokens_internal
    return True


#: lmcache releases whose LocalDiskBackend keeps the pin an async lookup takes on each disk
#: hit: batched_async_contains(pin=True) pins, the prefetch pins and unpins once more, and
#: nothing releases the first pin, so every chunk ever hit on disk stays unevictable.
DISK_PIN_LEAK_VERSIONS = frozenset({"0.5.6"})
_PIN_RECORDS = 4096  # lookups whose disk pins wait for their prefetch (bounded)


def patch_async_disk_pin_leak() -> bool:
    """Release the lookup's disk pins once that lookup's prefetch from disk has finished.

    Found by bench.engine_bench: with the daemon deleting dead chunks, the disk tier holds
    only live chunks, all of them hit and so pinned for good; LMCache then logs
    "Insufficient evictable disk cache space" and stores nothing more on disk. True when
    installed; False on releases without the leak.
    """
    if lmcache_version() not in DISK_PIN_LEAK_VERSIONS:
        return False
    import threading
    from collections import OrderedDict

    from lmcache.v1.storage_backend.local_disk_backend import LocalDiskBackend

    orig_contains = LocalDiskBackend.batched_async_contains
    orig_get = LocalDiskBackend.batched_get_non_blocking
    if is_patched(orig_get):
        return True
    pinned: OrderedDict[tuple[int, str], list[Any]] = OrderedDict()
    lock = threading.Lock()

    @functools.wraps(orig_contains)
    async def batched_async_contains(
        self: Any, lookup_id: str, keys: list, pin: bool = False
    ) -> int:
        hits = await orig_contains(self, lookup_id, keys, pin)
        if pin and hits:
            with lock:
                pinned[(id(self), lookup_id)] = list(keys[:hits])
                while len(pinned) > _PIN_RECORDS:
                    pinned.popitem(last=False)
        return hits

    @functools.wraps(orig_get)
    async def batched_get_non_blocking(
        self: Any, lookup_id: str, keys: list, *args: Any, **kwargs: Any
    ) -> Any:
        try:
            return await orig_get(self, lookup_id, keys, *args, **kwargs)
        finally:
            with lock:
                held = pinned.pop((id(self), lookup_id), [])
            wanted = set(keys)
            # 0.5.6 returns with disk_lock held when it cannot allocate staging memory;
            # never wait for ever on the loop thread because of that.
            if held and self.disk_lock.acquire(timeout=5.0):
                try:
                    for key in held:
                        meta = self.dict.get(key)
                        # Only keys this prefetch was for (lmcache unpins a rounded-off
                        # tail itself), only a pin still there (an evict may have won).
                        if key in wanted and meta is not None and meta.pin_count > 0:
                            meta.unpin()
                finally:
                    self.disk_lock.release()
            elif held:
                log.warning("ascend_ext: disk lock busy; %d lookup pins kept", len(held))

    mark_patched(batched_async_contains)
    mark_patched(batched_get_non_blocking)
    LocalDiskBackend.batched_async_contains = batched_async_contains
    LocalDiskBackend.batched_get_non_blocking = batched_get_non_blocking
    return True


#: lmcache releases whose LocalDiskBackend.remove(force=True) forgets the chunk's bytes in
#: current_cache_size (only its own LRU eviction subtracts them), so every chunk deleted
#: from outside — the memory API's evict, i.e. the daemon's steering — shrinks the disk tier
#: for good, until put() finds it "full" with nothing to evict.
DISK_SIZE_LEAK_VERSIONS = frozenset({"0.5.6"})


def patch_disk_remove_size() -> bool:
    """Subtract a force-removed chunk's size from LocalDiskBackend.current_cache_size."""
    if lmcache_version() not in DISK_SIZE_LEAK_VERSIONS:
        return False
    from lmcache.v1.storage_backend.local_disk_backend import LocalDiskBackend

    orig = LocalDiskBackend.remove
    if is_patched(orig):
        return True

    @functools.wraps(orig)
    def remove(self: Any, key: Any, force: bool = True) -> bool:
        meta = self.dict.get(key)
        removed = orig(self, key, force)
        # force=False is lmcache's own eviction, which has subtracted the size already.
        if removed and force and meta is not None:
            with self.disk_lock:
                self.current_cache_size = max(0.0, self.current_cache_size - meta.size)
        return removed

    mark_patched(remove)
    LocalDiskBackend.remove = remove
    return True
