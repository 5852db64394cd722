"""Prometheus metrics of one daemon (its own registry, so several can live in one process)."""

from __future__ import annotations

import platform
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ramakv_daemon.commit.record import CommitMeter
from ramakv_daemon.ports import BackendResult
from ramakv_protocol.version import package_version

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)


class DaemonMetrics(CommitMeter):
    """Counters and gauges; label values are bounded (event types, ops, outcomes only).

    The prometheus_client objects are built on first use (:meth:`build`: the first count,
    scrape or read of one of them; the daemon also builds them right after it listens):
    importing prometheus_client (http.server, wsgiref, ...) was a sixth of the daemon's
    start-up. Every count goes through them, so none is lost before they exist.
    """

    registry: CollectorRegistry
    events: Counter
    latency: Histogram
    sessions: Gauge
    chunks: Gauge
    references: Gauge
    backend_calls: Counter
    backend_chunks: Counter
    backend_errors: Counter
    prefetch_cancelled: Counter
    prefetch_cancelled_chunks: Counter
    evict_backlog: Gauge
    evict_window: Histogram
    window_rereferences: Counter
    rereference_delay: Histogram
    evictions_repeated: Counter
    subscribers: Gauge
    open_forks: Gauge
    forks_expired: Counter
    retention_deleted: Counter
    idle_actions: Counter
    idle_sweep_seconds: Histogram
    dropped_subscribers: Counter
    store_connected: Gauge
    store_reconnects: Counter
    takeovers: Counter
    releases: Counter
    commit_latency: Histogram
    commit_batch: Histogram
    ns_sessions: Gauge
    ns_chunks: Gauge
    ns_budget: Gauge
    ns_demoted: Gauge
    budget_victims: Counter
    budget_chunks: Counter

    def __init__(self, known_types: set[str]) -> None:
        self.known_types = known_types
        self._event_children: dict[tuple[str, bool], tuple[Any, Any]] = {}
        self._store_counted: dict[str, int] = {}
        self._build_lock = threading.Lock()
        self._built = False

    def __getattr__(self, name: str) -> Any:
        # Called only for an attribute not set: a metric, before build() made them.
        if name.startswith("_") or self._built:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.build()
        return object.__getattribute__(self, name)

    def build(self) -> None:
        """Make the registry and every metric (once; later calls return at once)."""
        if self._built:
            return
        with self._build_lock:  # a commit thread and the loop may both get here first
            if not self._built:
                self._build()
                self._built = True

    def _build(self) -> None:
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            Gauge,
            Histogram,
            Info,
            ProcessCollector,
            disable_created_metrics,
        )

        # The *_created series (one timestamp per counter and histogram child) double the
        # output and say only when a label was first seen. The switch is process-wide.
        disable_created_metrics()
        self.registry = r = CollectorRegistry()
        # process_cpu_seconds_total, process_resident_memory_bytes, open fds, ... (Linux).
        ProcessCollector(registry=r)
        Info("ramakv_build", "ram-a-kv version and Python it runs on", registry=r).info(
            {"version": package_version(), "python": platform.python_version()}
        )
        self.events = Counter("ramakv_events", "Events handled", ["type", "outcome"], registry=r)
        self.latency = Histogram(
            "ramakv_event_latency_seconds",
            "Event handling latency",
            ["type"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
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
        self.prefetch_cancelled = Counter(
            "ramakv_prefetch_cancelled",
            "Prefetches dropped because their request was served (turn_end): unsent (none "
            "of it reached the cache, or it knows no cancel), stopped (the cache stopped "
            "it), ended (the cache had finished it), failed (the cancel call failed)",
            ["outcome"],
            registry=r,
        )
        self.prefetch_cancelled_chunks = Counter(
            "ramakv_prefetch_cancelled_chunks",
            "Chunks those prefetches did not load: parts never sent, and those the cache skipped",
            ["outcome"],
            registry=r,
        )
        self.evict_backlog = Gauge(
            "ramakv_evict_outbox", "Evictions waiting for backend delivery", registry=r
        )
        self.evict_window = Histogram(
            "ramakv_evict_window_seconds",
            "From an evict body written to the cache's "
            "answer (a cache acting inline acts inside it)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.window_rereferences = Counter(
            "ramakv_evict_window_rereferences",
            "Chunks referenced again after their evict "
            "was written: kept (a keep reached a deferring cache in time) or exposed (may "
            "have been evicted while referenced)",
            ["outcome"],
            registry=r,
        )
        self.rereference_delay = Histogram(
            "ramakv_evict_window_rereference_seconds",
            "How long after its evict was written a chunk was referenced again",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.evictions_repeated = Counter(
            "ramakv_evictions_repeated",
            "Chunks whose eviction was delivered again (after a "
            "restart or a failed call the cache may have acted on): harmless, counted",
            registry=r,
        )
        self.subscribers = Gauge("ramakv_trace_subscribers", "Trace subscribers", registry=r)
        self.open_forks = Gauge("ramakv_open_forks", "Open fork holds", registry=r)
        self.forks_expired = Counter(
            "ramakv_fork_holds_expired", "Fork holds released by fork_hold_ttl_s", registry=r
        )
        self.retention_deleted = Counter(
            "ramakv_retention_deleted_chunks",
            "Chunks the retention sweep deleted: named by no one for retain_unreferenced_s",
            registry=r,
        )
        self.idle_actions = Counter(
            "ramakv_idle_policy_sessions",
            "Sessions the idle policies suspended (idle_suspend_s) or closed (idle_close_s)",
            ["namespace", "action"],
            registry=r,
        )
        self.idle_sweep_seconds = Histogram(
            "ramakv_idle_sweep_seconds",
            "One idle-policy sweep over every namespace, start to end (in slices)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.dropped_subscribers = Counter(
            "ramakv_trace_dropped_subscribers", "Trace subscribers dropped for lag", registry=r
        )
        self.store_connected = Gauge(
            "ramakv_store_connected",
            "1 while the shared (PostgreSQL) store answers, 0 while changes get 503",
            registry=r,
        )
        # Counters (exposed as *_total): the ownership side counts, each scrape adds what
        # it counted since the last one (store_status).
        self.store_reconnects = Counter(
            "ramakv_store_reconnects",
            "Times the store's LISTEN connection came back",
            registry=r,
        )
        self.takeovers = Counter(
            "ramakv_session_takeovers", "Sessions this node took from another node", registry=r
        )
        self.releases = Counter(
            "ramakv_session_releases",
            "Sessions this node released: another node took them, or they were closed there",
            registry=r,
        )
        self.commit_latency = Histogram(
            "ramakv_store_commit_seconds",
            "Group-commit latency (SQLite or PostgreSQL)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.commit_batch = Histogram(
            "ramakv_store_commit_batch_events",
            "Events per group commit (SQLite or PostgreSQL)",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=r,
        )

        # Per namespace; the label is the deployment's name ("default" for the unnamed one,
        # "unconfigured" for every namespace found only in the database): bounded by config.
        self.ns_sessions = Gauge(
            "ramakv_namespace_sessions",
            "Sessions by namespace and state",
            ["namespace", "state"],
            registry=r,
        )
        self.ns_chunks = Gauge(
            "ramakv_namespace_chunks_referenced",
            "Distinct chunks referenced, by namespace",
            ["namespace"],
            registry=r,
        )
        self.ns_budget = Gauge(
            "ramakv_ddr_budget_chunks",
            "Configured DDR budget in chunks (0 = none)",
            ["namespace"],
            registry=r,
        )
        self.ns_demoted = Gauge(
            "ramakv_budget_demoted_sessions",
            "Sessions whose private chunks the budget moved out of DDR",
            ["namespace"],
            registry=r,
        )
        self.budget_victims = Counter(
            "ramakv_budget_demotions",
            "Sessions demoted by the DDR budget",
            ["namespace"],
            registry=r,
        )
        self.budget_chunks = Counter(
            "ramakv_budget_demoted_chunks",
            "Chunks demoted by the DDR budget",
            ["namespace"],
            registry=r,
        )

    def window(self, outcome: str, count: int, seconds: float) -> None:
        """One report of the eviction window (see EvictWindow)."""
        if outcome == "answered":
            self.evict_window.observe(seconds)
        elif outcome == "rereferenced":
            self.rereference_delay.observe(seconds)
        elif outcome == "repeated":
            self.evictions_repeated.inc(count)
        else:
            self.window_rereferences.labels(outcome).inc(count)

    def subscriber_dropped(self) -> None:
        """Count one trace subscriber dropped for lag."""
        self.dropped_subscribers.inc()

    def budget(self, label: str, sessions: int, chunks: int) -> None:
        """Count one budget demotion round."""
        self.budget_victims.labels(label).inc(sessions)
        self.budget_chunks.labels(label).inc(chunks)

    def namespaces(self, spaces: Iterable[Any]) -> None:
        """Refresh the per-namespace gauges (``spaces``: the service's Namespace objects)."""
        spaces = list(spaces)
        if len(spaces) < 2:
            return  # only the unnamed default namespace: the totals above say it all
        totals: dict[str, list[int]] = {}
        for ns in spaces:
            m = ns.manager
            suspended = m.suspended_count
            t = totals.setdefault(ns.metric_label, [0, 0, 0, 0, 0])
            t[0] += len(m.sessions) - suspended
            t[1] += suspended
            t[2] += len(m.refcounts)
            t[3] += ns.budget.budget
            t[4] += len(ns.budget.demoted)
        for label, (active, suspended, chunks, budget, demoted) in totals.items():
            self.ns_sessions.labels(label, "active").set(active)
            self.ns_sessions.labels(label, "suspended").set(suspended)
            self.ns_chunks.labels(label).set(chunks)
            self.ns_budget.labels(label).set(budget)
            self.ns_demoted.labels(label).set(demoted)

    def event(self, type_: str, ok: bool, seconds: float) -> None:
        """Count one event; unknown types share one label so clients cannot blow it up."""
        children = self._event_children.get((type_, ok))
        if children is None:
            # labels() takes a lock and builds a key each call: look the pair up once.
            label = type_ if type_ in self.known_types else "unknown"
            children = (
                self.events.labels(label, "ok" if ok else "error"),
                self.latency.labels(label),
            )
            if label != "unknown":  # never cache keys a client chose
                self._event_children[(type_, ok)] = children
        children[0].inc()
        children[1].observe(seconds)

    def backend(self, op: str, count: int, result: BackendResult) -> None:
        """Count one backend call."""
        self.backend_calls.labels(op, "ok" if result.ok else "error").inc()
        self.backend_chunks.labels(op).inc(count)
        if not result.ok:
            self.backend_errors.labels(op).inc()

    def prefetch_cancel(self, outcome: str, chunks: int) -> None:
        """Count one prefetch dropped because its request was served."""
        self.prefetch_cancelled.labels(outcome).inc()
        self.prefetch_cancelled_chunks.labels(outcome).inc(chunks)

    def commit(self, seconds: float, batch: int) -> None:
        """Record one group commit."""
        self.commit_latency.observe(seconds)
        self.commit_batch.observe(batch)

    def render(self, refresh: Callable[[], None] | None = None) -> bytes:
        """Text exposition format, after refreshing gauges."""
        if refresh is not None:
            refresh()
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

    def store_status(self, status: dict[str, object]) -> None:
        """The store's gauge and counters (SQLite: always connected, no handovers)."""
        self.store_connected.set(1 if status["connected"] else 0)
        for key, counter in (
            ("reconnects", self.store_reconnects),
            ("takeovers", self.takeovers),
            ("releases", self.releases),
        ):
            total = int(status[key])  # type: ignore[call-overload]
            seen = self._store_counted.get(key, 0)
            if total > seen:  # the counts only grow; a counter only goes up
                counter.inc(total - seen)
                self._store_counted[key] = total
