"""The metrics' prometheus_client objects are built on first use (start-up does not wait
for prometheus_client): whatever is counted first is counted, whichever path got there."""

from __future__ import annotations

import threading

import pytest

from ramakv_daemon.ports import BackendResult
from ramakv_daemon.telemetry.metrics import DaemonMetrics


def built(m: DaemonMetrics) -> bool:
    return "registry" in vars(m)


def test_the_first_counts_build_them_and_are_counted() -> None:
    m = DaemonMetrics({"turn_end"})
    assert not built(m)
    m.event("turn_end", True, 0.001)  # a method: builds them, then counts
    assert built(m)
    m.subscriber_dropped()
    m.backend("evict", 3, BackendResult(True))
    text = m.render().decode()
    assert 'ramakv_events_total{outcome="ok",type="turn_end"} 1.0' in text
    assert "ramakv_trace_dropped_subscribers_total 1.0" in text
    assert 'ramakv_backend_chunks_total{op="evict"} 3.0' in text
    assert "ramakv_build_info{" in text and "process_cpu_seconds_total" in text


def test_an_attribute_builds_them_and_a_scrape_of_nothing_counted_renders() -> None:
    m = DaemonMetrics({"turn_end"})
    m.forks_expired.inc(2)  # read as an attribute (the sweeps do)
    assert "ramakv_fork_holds_expired_total 2.0" in m.render().decode()
    assert b"ramakv_events_total" in DaemonMetrics(set()).render()


def test_built_once_when_two_threads_come_first() -> None:
    m = DaemonMetrics({"turn_end"})
    barrier = threading.Barrier(4)

    def count() -> None:
        barrier.wait()
        m.commit(0.001, 1)

    threads = [threading.Thread(target=count) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert "ramakv_store_commit_batch_events_count 4.0" in m.render().decode()


def test_a_name_that_is_no_metric_is_an_attribute_error() -> None:
    m = DaemonMetrics(set())
    for name in ("no_such_metric", "_private"):
        with pytest.raises(AttributeError, match=name):
            getattr(m, name)
