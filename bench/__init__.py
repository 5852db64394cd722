"""ram-a-kv benchmarks: every speed figure is a ratio against a reference measured in the same run."""
