"""The LMCache side of ram-a-kv that the engine loads (its development tools: ascend_ext_dev).

install() patches lmcache (and vLLM's connector) in process with the memory API
(/memory/prefetch, evict, keep, order, query), deferred evicts, order hints and hashing."""

from ascend_ext.installer import install  # noqa: F401
