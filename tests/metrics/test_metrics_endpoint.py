"""GET /metrics: parses with prometheus-client, counters move with events, bounded labels."""

from __future__ import annotations

import asyncio
import platform
from collections.abc import Sequence

from prometheus_client.parser import text_string_to_metric_families
from support.daemon_app import DaemonClient, RecordingBackend, StartDaemon
from support.trace_wire import recv

from ramakv_daemon.adapters.backends.noop import NoopBackend
from ramakv_daemon.ports import BackendResult, EvictMode

Metrics = dict[tuple[str, tuple[tuple[str, str], ...]], float]

# version/python: ramakv_build_info's, fixed for the life of the process.
ALLOWED_LABELS = {"type", "outcome", "state", "op", "le", "version", "python"}


def val(m: Metrics, name: str, **labels: str) -> float:
    """One sample's value (0 when absent)."""
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


async def wait_for(d: DaemonClient, name: str, at_least: float, **labels: str) -> Metrics:
    """Poll /metrics until a sample reaches ``at_least`` (backend calls are asynchronous)."""
    m: Metrics = {}
    for _ in range(12000):  # hang guard: backend calls are asynchronous
        m = await d.metrics()
        if val(m, name, **labels) >= at_least:
            return m
        await asyncio.sleep(0.01)
    raise AssertionError(f"{name}{labels} stayed at {val(m, name, **labels)} < {at_least}")


async def test_metrics_parse_and_families(daemon: DaemonClient) -> None:
    d = daemon
    await d.ok("health")
    text = await d.metrics_text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    expected = {
        "ramakv_events": "counter",
        "ramakv_event_latency_seconds": "histogram",
        "ramakv_sessions": "gauge",
        "ramakv_chunks_referenced": "gauge",
        "ramakv_chunk_references": "gauge",
        "ramakv_backend_calls": "counter",
        "ramakv_backend_chunks": "counter",
        "ramakv_backend_errors": "counter",
        "ramakv_trace_subscribers": "gauge",
        "ramakv_trace_dropped_subscribers": "counter",
        "ramakv_store_commit_seconds": "histogram",
    }
    for name, kind in expected.items():
        assert name in families, name
        assert families[name].type == kind, (name, families[name].type)
        assert families[name].documentation


async def test_counters_move_as_events_are_sent(start_daemon: StartDaemon) -> None:
    d = await start_daemon(backend=RecordingBackend())
    m0 = await d.metrics()
    await d.turn_end("a", ["sys", "a1", "a2"])
    await d.turn_end("b", ["sys", "b1"])
    await d.ok("turn_start", session_id="a")
    await d.err("session_fork_end", session_id="a")
    await d.err("session_map", session_id="ghost")
    await d.ok("session_suspend", session_id="b")
    ws = await d.ws()
    await recv(ws)
    m = await wait_for(d, "ramakv_backend_calls_total", 1, op="prefetch", outcome="ok")

    def moved(name: str, **labels: str) -> float:
        return val(m, name, **labels) - val(m0, name, **labels)

    assert moved("ramakv_events_total", type="turn_end", outcome="ok") == 2
    assert moved("ramakv_events_total", type="turn_start", outcome="ok") == 1
    assert moved("ramakv_events_total", type="session_fork_end", outcome="error") == 1
    assert moved("ramakv_events_total", type="session_map", outcome="error") == 1
    assert moved("ramakv_events_total", type="session_suspend", outcome="ok") == 1
    assert moved("ramakv_event_latency_seconds_count", type="turn_end") == 2
    assert moved("ramakv_event_latency_seconds_sum", type="turn_end") > 0
    assert val(m, "ramakv_event_latency_seconds_bucket", type="turn_end", le="+Inf") == 2
    # State gauges.
    assert val(m, "ramakv_sessions", state="active") == 1
    assert val(m, "ramakv_sessions", state="suspended") == 1
    assert val(m, "ramakv_chunks_referenced") == 3  # sys, a1, a2
    assert val(m, "ramakv_chunk_references") == 3
    assert val(m, "ramakv_trace_subscribers") == 1
    # Backend and SQLite.
    assert moved("ramakv_backend_chunks_total", op="prefetch") == 3
    assert moved("ramakv_store_commit_seconds_count") >= 1
    await d.ok("session_fork", session_id="a")
    m2 = await d.metrics()
    assert val(m2, "ramakv_chunk_references") == 6
    assert val(m2, "ramakv_chunks_referenced") == 3
    await ws.close()
    for _ in range(12000):  # hang guard
        if val(await d.metrics(), "ramakv_trace_subscribers") == 0:
            break
        await asyncio.sleep(0.01)
    assert val(await d.metrics(), "ramakv_trace_subscribers") == 0


async def test_evictions_counted(start_daemon: StartDaemon) -> None:
    d = await start_daemon(backend=RecordingBackend())
    await d.turn_end("a", ["x", "y"])
    await d.ok("session_close", session_id="a")
    m = await wait_for(d, "ramakv_backend_chunks_total", 2, op="evict_delete")
    assert val(m, "ramakv_backend_calls_total", op="evict_delete", outcome="ok") >= 1
    assert val(m, "ramakv_chunks_referenced") == 0


class FailingBackend(NoopBackend):
    """Refuses every prefetch and eviction (as a down LMCache would)."""

    name = "failing"

    async def prefetch(self, chunk_hashes: Sequence[str], tag: str) -> BackendResult:
        return BackendResult(ok=False, status=0, detail="connection refused")

    async def evict(self, chunk_hashes: Sequence[str], mode: EvictMode) -> BackendResult:
        return BackendResult(ok=False, status=0, detail="connection refused")


async def test_backend_errors_counted(start_daemon: StartDaemon) -> None:
    d = await start_daemon(backend=FailingBackend())
    await d.turn_end("a", ["x", "y"])
    await d.ok("turn_start", session_id="a")
    m = await wait_for(d, "ramakv_backend_errors_total", 1, op="prefetch")
    assert val(m, "ramakv_backend_calls_total", op="prefetch", outcome="error") >= 1
    assert val(m, "ramakv_events_total", type="turn_start", outcome="ok") == 1


async def test_no_session_id_label_and_bounded_cardinality(daemon: DaemonClient) -> None:
    d = daemon
    for i in range(30):
        await d.turn_end(f"session-{i}", [f"h{i}", "shared"])
        await d.err(f"bogus_type_{i}", session_id=f"session-{i}")
    await d.post({"type": "x" * 500})
    text = await d.metrics_text()
    assert "session-" not in text and "bogus_type" not in text and "h7" not in text
    seen_types: set[str] = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert set(sample.labels) <= ALLOWED_LABELS, (sample.name, sample.labels)
            if "type" in sample.labels:
                seen_types.add(sample.labels["type"])
    known = set((await d.ok("list_events"))["events"]) | {"list_events"}
    assert seen_types <= known | {"unknown"}, seen_types - known
    m = await d.metrics()
    assert val(m, "ramakv_events_total", type="unknown", outcome="error") == 31


async def test_build_info_process_metrics_and_no_created_series(daemon: DaemonClient) -> None:
    from ramakv_sdk.version import package_version

    await daemon.turn_end("s", ["h1"])
    text = await daemon.metrics_text()
    m = await daemon.metrics()
    assert (
        val(m, "ramakv_build_info", version=package_version(), python=platform.python_version())
        == 1
    )
    assert "_created" not in text  # counters and histograms without their *_created twins
    assert val(m, "process_resident_memory_bytes") > 0
    assert val(m, "process_open_fds") > 0


class CountedNoop(NoopBackend):
    """The noop backend (name "noop"), telling the test when the daemon called it."""

    def __init__(self) -> None:
        self.called: list[str] = []

    async def prefetch(self, chunk_hashes: Sequence[str], tag: str) -> BackendResult:
        result = await super().prefetch(chunk_hashes, tag)
        self.called.append("prefetch")
        return result

    async def evict(self, chunk_hashes: Sequence[str], mode: EvictMode) -> BackendResult:
        result = await super().evict(chunk_hashes, mode)
        self.called.append(mode.value)
        return result


async def test_a_noop_backend_counts_no_backend_calls(start_daemon: StartDaemon) -> None:
    """A noop daemon sends nothing: no ramakv_backend_* sample says it did."""
    backend = CountedNoop()
    d = await start_daemon(backend=backend)
    await d.turn_end("a", ["x", "y"])
    await d.ok("turn_start", session_id="a")
    await d.ok("session_close", session_id="a")
    for _ in range(12000):  # hang guard: the dispatcher calls the backend after the reply
        if {"prefetch", "delete"} <= set(backend.called):
            break
        await asyncio.sleep(0.01)
    # The counting follows each call within the same step of the dispatcher's task.
    m = await d.metrics()
    assert not [k for k in m if k[0].startswith("ramakv_backend_")], sorted(m)
