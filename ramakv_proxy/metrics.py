"""The proxy's counters as Prometheus text (``GET /_ramakv/metrics``), via prometheus_client."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ramakv_proxy.grace import HORIZON_S
from ramakv_proxy.lifecycle import Lifecycle
from ramakv_sdk.sender import EventSender

# (stats field, metric name without _total, help)
_DECISIONS = (
    ("tool_calls", "ramakv_proxy_tool_calls", "Answers that called a tool"),
    ("suspends", "ramakv_proxy_suspends", "session_suspend sent after a tool pause"),
    (
        "suspends_cancelled",
        "ramakv_proxy_suspends_cancelled",
        "Tool pauses ended by a request within the grace period",
    ),
    ("closes_disconnect", "ramakv_proxy_closes_disconnect", "Sessions closed: client left"),
    ("closes_idle", "ramakv_proxy_closes_idle", "Sessions closed: no request for a while"),
    (
        "disconnects_superseded",
        "ramakv_proxy_disconnects_superseded",
        "Clients that left mid-answer after a newer request of theirs came (kept: a retry)",
    ),
    (
        "suspends_run_end",
        "ramakv_proxy_suspends_run_end",
        "Sessions suspended (inferred): the agent's run ended (a final answer, then no request)",
    ),
    (
        "run_end_cancelled",
        "ramakv_proxy_run_end_cancelled",
        "Final answers followed by a request within the grace (not suspended)",
    ),
    (
        "run_end_mispredictions",
        "ramakv_proxy_run_end_mispredictions",
        "Sessions that came back after their run-end suspend",
    ),
    (
        "run_end_no_returns",
        "ramakv_proxy_run_end_no_returns",
        f"Final answers whose session did not come back within {HORIZON_S:g} s or was "
        "closed first (each pulls the run-end grace down)",
    ),
    ("branches", "ramakv_proxy_branches", "Side calls reported as the session's branch"),
    ("closes_branch", "ramakv_proxy_closes_branch", "Branch sessions closed after their answer"),
    (
        "branches_promoted",
        "ramakv_proxy_branches_promoted",
        "Side calls whose prompt the next request extended (history rewritten)",
    ),
    (
        "daemon_timeouts",
        "ramakv_proxy_daemon_timeouts",
        "Waits on the daemon's answers cut at daemon_wait_ms (each opens the breaker)",
    ),
    (
        "daemon_waits_skipped",
        "ramakv_proxy_daemon_waits_skipped",
        "Waits on the daemon not made: the circuit breaker was open",
    ),
    (
        "restores_daemon_suspended",
        "ramakv_proxy_restores_daemon_suspended",
        "Restores of a session the daemon had suspended (its idle policy), found before a request",
    ),
    (
        "restore_chunks_held",
        "ramakv_proxy_restore_chunks_held",
        "Chunks of restored sessions some cache tier held",
    ),
    (
        "restore_chunks_in_ddr",
        "ramakv_proxy_restore_chunks_in_ddr",
        "Of those, chunks in DDR when the request was forwarded",
    ),
    (
        "restore_wait_s",
        "ramakv_proxy_restore_wait_seconds",
        "Time restored requests waited for their chunks",
    ),
)


class _ProxyCollector(Collector):
    def __init__(self, sender: Callable[[], EventSender], life: Callable[[], Lifecycle]) -> None:
        self._sender = sender
        self._life = life

    def collect(self) -> Iterator[Metric]:
        sender, life = self._sender(), self._life()
        sent = sender.stats.as_dict()
        events = CounterMetricFamily(
            "ramakv_proxy_events",
            "Events the proxy handed to the daemon, by what became of them",
            labels=["outcome"],
        )
        for outcome in ("sent", "failed", "dropped_unavailable", "dropped_full"):
            events.add_metric([outcome], sent[outcome])
        yield events
        yield GaugeMetricFamily(
            "ramakv_proxy_events_pending", "Events queued for the daemon", value=sender.pending
        )
        yield GaugeMetricFamily(
            "ramakv_proxy_sessions",
            "Sessions the proxy tracks (in flight, in a tool pause, suspended, idle)",
            value=life.sessions,
        )
        st = life.stats
        restores = CounterMetricFamily(
            "ramakv_proxy_restores",
            "Restores before a suspended session's request, by how the wait for its chunks ended",
            labels=["wait"],
        )
        restores.add_metric(["landed"], st.restore_landed)
        restores.add_metric(["timeout"], st.restore_timed_out)
        restores.add_metric(["unknown"], st.restore_unknown)
        yield restores
        yield GaugeMetricFamily(
            "ramakv_proxy_run_end_grace_seconds",
            "The run-end grace now (the 0.9 quantile of recent run ends' return gaps, "
            "a run end with no return counting 0; clamped)",
            value=life.grace.seconds,
        )
        yield GaugeMetricFamily(
            "ramakv_proxy_daemon_breaker_open",
            "1 while the circuit breaker on the daemon's answers is open",
            value=1.0 if life.breaker.is_open else 0.0,
        )
        for field, name, help_ in _DECISIONS:
            yield CounterMetricFamily(name, help_, value=getattr(st, field))


def proxy_registry(
    sender: Callable[[], EventSender], life: Callable[[], Lifecycle]
) -> CollectorRegistry:
    """A registry of this proxy's counters alone (no process or platform series)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ProxyCollector(sender, life))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The registry's exposition text."""
    return generate_latest(registry)
