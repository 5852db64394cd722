"""Carrying committed evictions and prefetches to the cache backend."""
