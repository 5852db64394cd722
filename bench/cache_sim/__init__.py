"""Cache effectiveness: replay an agent workload against a two-tier KV store, LRU vs steered."""

from bench.cache_sim.suite import run, table

__all__ = ["run", "table"]
