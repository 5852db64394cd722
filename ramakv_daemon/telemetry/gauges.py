"""The state gauges of /metrics, brought up to date just before it renders."""

from __future__ import annotations

from ramakv_daemon.ownership.ownership import Ownership
from ramakv_daemon.routing.namespaces import Namespaces
from ramakv_daemon.telemetry.metrics import DaemonMetrics
from ramakv_daemon.trace.hub import TraceHub


def refresh_gauges(
    m: DaemonMetrics, namespaces: Namespaces, trace: TraceHub, ownership: Ownership
) -> None:
    """Sessions by state, chunks, references, subscribers, forks, backlog, namespaces and
    the store's status."""
    rows = namespaces.describe()
    managers = namespaces.managers.values()
    m.sessions.labels("active").set(sum(r["sessions"]["active"] for r in rows))
    m.sessions.labels("suspended").set(sum(r["sessions"]["suspended"] for r in rows))
    m.chunks.set(sum(r["chunks"] for r in rows))
    m.references.set(sum(x.refcounts.total_references() for x in managers))
    m.subscribers.set(len(trace.subscribers))
    m.open_forks.set(sum(len(x.forks) for x in managers))
    m.evict_backlog.set(sum(r["evict_backlog"] for r in rows))
    m.namespaces(namespaces)
    m.store_status(ownership.status())
