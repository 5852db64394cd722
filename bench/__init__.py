"""ram-a-kv benchmarks: each speed figure is a ratio against a reference from the same run."""
