"""Prometheus metrics of one daemon (its own registry, so several can live in one process)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ramakv_daemon.ports import BackendResult

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)


class DaemonMetrics:
    """Counters and gauges; label values are bounded (event types, ops, outcomes only)."""

    def __init__(self, known_types: set[str]) -> None:
        self.registry = CollectorRegistry()
        self.known_types = known_types
        r = self.registry
        self.events = Counter(
            "ramakv_events", "Events handled", ["type", "outcome"], registry=r
        )
        self.latency = Histogram(
            "ramakv_event_latency_seconds", "Event handling latency", ["type"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.sessions = Gauge("ramakv_sessions", "Sessions by state", ["state"], registry=r)
        self.chunks = Gauge("ramakv_chunks_referenced", "Distinct chunks referenced", registry=r)
        self.references = Gauge("ramakv_chunk_references", "Total chunk references", registry=r)
        self.backend_calls = Counter(
            "ramakv_backend_calls", "Backend calls", ["op", "outcome"], registry=r
        )
        self.backend_chunks = Counter(
            "ramakv_backend_chunks", "Chunks sent to the backend", ["op"], registry=r
        )
        self.backend_errors = Counter(
            "ramakv_backend_errors", "Backend calls that failed", ["op"], registry=r
        )
        self.evict_backlog = Gauge(
            "ramakv_evict_outbox", "Evictions waiting for backend delivery", registry=r
        )
        self.subscribers = Gauge("ramakv_trace_subscribers", "Trace subscribers", registry=r)
        self.dropped_subscribers = Counter(
            "ramakv_trace_dropped_subscribers", "Trace subscribers dropped for lag", registry=r
        )
        self.commit_latency = Histogram(
            "ramakv_sqlite_commit_seconds", "SQLite group-commit latency",
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.commit_batch = Histogram(
            "ramakv_sqlite_commit_batch_events", "Events per SQLite commit",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=r,
        )

    def event(self, type_: str, ok: bool, seconds: float) -> None:
        """Count one event; unknown types share one label so clients cannot blow it up."""
        label = type_ if type_ in self.known_types else "unknown"
        self.events.labels(label, "ok" if ok else "error").inc()
        self.latency.labels(label).observe(seconds)

    def backend(self, op: str, count: int, result: BackendResult) -> None:
        """Count one backend call."""
        self.backend_calls.labels(op, "ok" if result.ok else "error").inc()
        self.backend_chunks.labels(op).inc(count)
        if not result.ok:
            self.backend_errors.labels(op).inc()

    def commit(self, seconds: float, batch: int) -> None:
        """Record one group commit."""
        self.commit_latency.observe(seconds)
        self.commit_batch.observe(batch)

    def render(self, refresh: Callable[[], None] | None = None) -> bytes:
        """Text exposition format, after refreshing gauges."""
        if refresh is not None:
            refresh()
        return generate_latest(self.registry)
