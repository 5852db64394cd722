"""The ram-a-kv daemon: session events in, KV-chunk refcounts kept and stored, prefetches
and releases out to the cache (docs/architecture.md draws its layers)."""
