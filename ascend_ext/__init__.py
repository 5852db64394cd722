"""The LMCache side of ram-a-kv: install() patches lmcache (and vLLM's connector) in
process with the memory API (/memory/prefetch, evict, keep, order, query), deferred evicts,
order hints and hashing; beside them the demo, tiny engine and development-server tools."""

from ascend_ext.installer import install  # noqa: F401
