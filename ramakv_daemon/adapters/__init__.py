"""ram-a-kv package."""
