"""ascend_ext.install(): patch lmcache 0.5.6 (and vLLM's connector if present) in this process."""

from __future__ import annotations

import functools
import importlib
import logging
import os
import threading
from typing import Any

from ascend_ext import hashing, lmcache_fixes
from ascend_ext.patch_mark import is_patched, mark_patched

log = logging.getLogger("ascend_ext.install")

_lock = threading.Lock()
_done: dict[str, bool] = {}

#: Set to "0" to make install() a no-op (e.g. when vLLM loads it as a general plugin).
DISABLE_ENV = "RAMAKV_ASCEND_EXT"
#: Comma-separated patch names install() leaves out (reported False), e.g. to reproduce an
#: lmcache bug a fix hides: RAMAKV_ASCEND_EXT_SKIP=async_loading_double_release_fix.
SKIP_ENV = "RAMAKV_ASCEND_EXT_SKIP"


def install(*, memory_api: bool = True, vllm: bool = True) -> dict[str, bool]:
    """Apply every patch once (idempotent, thread-safe); return which ones are active.

    Must run in each engine process (scheduler and workers) before the LMCache connector
    is built: vLLM's general-plugin entry point or ``kv_connector_module_path =
    ascend_ext.vllm_connector`` do that.
    """
    if os.environ.get(DISABLE_ENV, "1") == "0":
        return dict(_done)
    with _lock:
        _once("blake3_hash", register_blake3)
        _once("lookup_client_upgrade", patch_lookup_client_factory)
        _once("cpu_kv_connector", lmcache_fixes.patch_cpu_kv_connector)
        _once("async_loading_double_release_fix", lmcache_fixes.patch_async_double_release)
        _once("async_disk_pin_release_fix", lmcache_fixes.patch_async_disk_pin_leak)
        _once("disk_remove_size_fix", lmcache_fixes.patch_disk_remove_size)
        if memory_api:
            _once("memory_api", _install_memory_api)
        if vllm:
            _once("vllm_request_finished", patch_vllm_request_finished)
        return dict(_done)


def _once(name: str, fn: Any) -> None:
    """Run a patch unless it already succeeded; a failure is logged and reported as False."""
    if _done.get(name):
        return
    if name in {n.strip() for n in os.environ.get(SKIP_ENV, "").split(",")}:
        log.warning("ascend_ext: %s left out (%s)", name, SKIP_ENV)
        _done[name] = False
        return
    try:
        _done[name] = bool(fn())
    except ImportError as e:
        log.info("ascend_ext: %s not installed (%s)", name, e)
        _done[name] = False


def register_blake3() -> bool:
    """Make ``pre_caching_hash_algorithm: blake3`` resolve to ascend_ext.hashing in lmcache."""
    from lmcache.v1 import token_database as tdb

    base = tdb.TokenDatabase
    if is_patched(base._get_vllm_hash_func):
        return True
    orig_get = base._get_vllm_hash_func

    @functools.wraps(orig_get)
    def _get_vllm_hash_func(self: Any, hash_algorithm: str) -> Any:
        # lmcache looks names up in vLLM only and falls back to the salted builtin hash();
        # answer ours first so the name works with and without vLLM.
        if hash_algorithm == hashing.ALGORITHM:
            return hashing.lmcache_hash_func
        return orig_get(self, hash_algorithm)

    mark_patched(_get_vllm_hash_func)
    base._get_vllm_hash_func = _get_vllm_hash_func

    chunked = tdb.ChunkedTokenDatabase
    orig_init = chunked._get_init_hash

    @functools.wraps(orig_init)
    def _get_init_hash(self: Any) -> int:
        # With vLLM present lmcache sets NONE_HASH from vLLM's init_none_hash, which is
        # random unless PYTHONHASHSEED is set; the blake3 format fixes the first prefix at 0.
        if getattr(self, "hash_func", None) is hashing.lmcache_hash_func:
            return hashing.INIT_HASH
        return orig_init(self)

    chunked._get_init_hash = _get_init_hash
    return True


def patch_lookup_client_factory() -> bool:
    """Upgrade every async lookup client lmcache's factory builds (at start and on recreate)."""
    from lmcache.v1.lookup_client.factory import LookupClientFactory
    from lmcache.v1.lookup_client.lmcache_async_lookup_client import LMCacheAsyncLookupClient

    from ascend_ext.lookup_client import RamAKVAsyncLookupClient, unwrap_lookup_client

    orig = LookupClientFactory.create_lookup_client
    if is_patched(orig):
        return True

    @functools.wraps(orig)
    def create_lookup_client(*args: Any, **kwargs: Any) -> Any:
        client = orig(*args, **kwargs)
        if isinstance(unwrap_lookup_client(client), LMCacheAsyncLookupClient):
            metadata = kwargs.get("metadata", args[1] if len(args) > 1 else None)
            RamAKVAsyncLookupClient.from_existing(client, metadata)
        return client

    mark_patched(create_lookup_client)
    LookupClientFactory.create_lookup_client = staticmethod(create_lookup_client)
    return True


def patch_vllm_request_finished() -> bool:
    """Wrap LMCacheConnectorV1Impl.request_finished; False when vLLM is not importable."""
    try:
        importlib.import_module("vllm")
    except ImportError:
        return False
    from lmcache.integration.vllm.vllm_v1_adapter import LMCacheConnectorV1Impl

    from ascend_ext.connector import wrap_request_finished

    LMCacheConnectorV1Impl.request_finished = wrap_request_finished(
        LMCacheConnectorV1Impl.request_finished
    )
    return True


def _install_memory_api() -> bool:
    """The /memory/* routes of the sibling memory_api module, when it provides install()."""
    mod = importlib.import_module("ascend_ext.memory_api")
    fn = getattr(mod, "install", None)
    if fn is None:
        return False
    fn()
    return True
