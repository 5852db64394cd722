"""The LMCache side of ram-a-kv, loaded in the engine: install() patches lmcache (and vLLM's
connector) in process with the memory API (/memory/prefetch, evict, keep, order, query),
deferred evicts, order hints and hashing. Its development tools are ascend_ext_dev."""

from ascend_ext.installer import install  # noqa: F401
