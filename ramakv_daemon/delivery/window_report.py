"""An eviction window's reports: counted, traced, and a warning for an exposed chunk."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol, cast

from ramakv_protocol.records import EvictWindowBody, RecordBody, WindowOutcome

log = logging.getLogger("ramakv.backend")

TRACE_HASHES = 20  # hashes named in one evict_window trace record


class WindowMetrics(Protocol):
    """The metrics a window report counts (telemetry.metrics.DaemonMetrics)."""

    def window(self, outcome: str, count: int, seconds: float) -> None: ...


def window_record(key: str, outcome: str, hashes: list[str]) -> EvictWindowBody | None:
    """The trace record of one window outcome (None for those only measured)."""
    if outcome not in ("kept", "missed", "exposed", "repeated"):
        return None
    record: EvictWindowBody = {
        "kind": "evict_window",
        "ts": time.time(),
        "outcome": cast(WindowOutcome, outcome),
        "count": len(hashes),
        "hashes": hashes[:TRACE_HASHES],
    }
    if key:
        record["namespace"] = key
    return record


def report_window(
    metrics: WindowMetrics,
    publish: Callable[[RecordBody], object],
    key: str,
    outcome: str,
    hashes: list[str],
    seconds: float,
) -> None:
    """One window report of namespace ``key``: metrics; a trace record and, for an
    exposed chunk, a warning."""
    metrics.window(outcome, len(hashes), seconds)
    record = window_record(key, outcome, hashes)
    if record is not None:
        publish(record)
        if outcome == "exposed":
            log.warning(
                "%d chunks referenced again while their eviction may have been "
                "acted on (namespace %r): %s",
                len(hashes),
                key,
                record["hashes"],
            )
