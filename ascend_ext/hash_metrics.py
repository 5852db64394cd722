"""Prometheus metrics of the chunk-hash path (default registry; multiprocess-safe for vLLM)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

HASHES_CACHED = Gauge(
    "ramakv_lookup_hashes_cached",
    "Lookups whose chunk hashes are held until request_finished",
    # With PROMETHEUS_MULTIPROC_DIR (vLLM's /metrics over its processes) one sum, not one
    # sample per pid; ignored in single-process mode.
    multiprocess_mode="livesum",
)
HASHES_DROPPED = Counter(
    "ramakv_lookup_hashes_dropped",
    "Cached lookup hashes dropped before request_finished took them",
    ["reason"],  # expired | capacity
)
REQUEST_FINISHED = Counter(
    "ramakv_request_finished_chunk_hashes",
    "request_finished results by where chunk_hashes came from",
    ["source"],  # cache | recompute | none
)
