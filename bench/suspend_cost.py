"""What one suspend (and one resume) of a restored 512-hash session costs the core, and its memory.

`python -m bench.suspend_cost [--sessions 10000] [--hashes 512] [--block 50]`

The store is idle_restart's (all sessions active, engine-spelled hashes), loaded in-process
twice: one manager as the daemon runs it (a refcount step over many hashes looked up at once,
the parked table beside the refcounts' arrays), one with the bulk steps off (BULK out of
reach: a bisect per hash, as before) and its parked table a dict (as before). Blocks of
suspends alternate between the two, so both see the same machine; the figure is the median
block's time a suspend, and the memory the parked table grew by once every session is
suspended (tracemalloc of each side's suspends alone). Then a resume: each suspended session's
turn_end with its stored map, on two managers suspended alike, one leaving the parked arrays
in one bulk step (refcount.take_each) and one a hash at a time (as before), blocks alternating."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from bench.idle_restart import overdue_store
from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.core import count_table, references
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.core.session import Session


async def _sessions(n: int, hashes: int) -> list[Session]:
    with tempfile.TemporaryDirectory() as d:
        path = overdue_store(Path(d) / "sessions.db", n, hashes)
        store = SqliteSessionStore(str(path), check_integrity=False)
        await store.open()
        try:
            return await store.load_all()
        finally:
            await store.close()


def _manager(sessions: list[Session], before: bool) -> SessionManager:
    m = SessionManager(retain_unreferenced_s=3600.0)
    m.load(sessions, (), time.time())
    if before:
        m.parked = dict(m.parked.items())  # the dict a sweep's suspends grew
    return m


def _suspend_all(m: SessionManager, ids: list[str], bulk: bool) -> None:
    was = count_table.BULK
    count_table.BULK = was if bulk else 1 << 62
    try:
        now = time.time()
        for sid in ids:
            m.session_suspend(sid, now)
    finally:
        count_table.BULK = was


def _resume_all(m: SessionManager, ids: list[str], bulk: bool) -> None:
    was = references.take_each
    if not bulk:
        references.take_each = lambda *_: None  # type: ignore[assignment]  # the per-hash steps
    try:
        now = time.time()
        for sid in ids:
            m.turn_end(sid, m.sessions[sid].chunk_hashes.as_tuple(), now)  # type: ignore[union-attr]
    finally:
        references.take_each = was


def _alternating(
    sides: dict[str, SessionManager],
    ids: list[str],
    block: int,
    step: Callable[[SessionManager, list[str], str], None],
) -> dict[str, list[float]]:
    """Seconds an event of ``step`` over each block of ``ids``, the sides taking turns."""
    took: dict[str, list[float]] = {k: [] for k in sides}
    for start in range(0, len(ids), block):
        part = ids[start : start + block]
        for name, m in sides.items():
            t = time.perf_counter()
            step(m, part, name)
            took[name].append((time.perf_counter() - t) / len(part))
    return took


def resumes(sessions: list[Session], block: int) -> dict[str, float]:
    """Median ms a resume turn_end, bulk against a hash at a time (both suspended alike)."""
    ids = [s.session_id for s in sessions]
    sides = {"bulk": _manager(sessions, False), "per_hash": _manager(sessions, False)}
    for m in sides.values():
        _suspend_all(m, ids, True)
    took = _alternating(
        sides, ids, block, lambda m, part, name: _resume_all(m, part, name == "bulk")
    )
    out = {f"resume_{k}_ms": statistics.median(v) * 1e3 for k, v in took.items()}
    out["resume_ratio"] = out["resume_bulk_ms"] / out["resume_per_hash_ms"]
    return out


def run(n: int, hashes: int, block: int) -> dict[str, float]:
    """Median ms a suspend, and MiB the suspends kept, for both sides."""
    sessions = asyncio.run(_sessions(n, hashes))
    ids = [s.session_id for s in sessions]
    sides = {"now": _manager(sessions, False), "before": _manager(sessions, True)}
    took = _alternating(
        sides, ids, block, lambda m, part, name: _suspend_all(m, part, name == "now")
    )
    out: dict[str, float] = {}
    for name in sides:
        out[f"{name}_ms"] = statistics.median(took[name]) * 1e3
    del sides
    # Memory apart: tracing allocations would have slowed the timed passes.
    for name in ("now", "before"):
        m = _manager(sessions, name == "before")
        tracemalloc.start()
        _suspend_all(m, ids, name == "now")
        out[f"{name}_mib"] = tracemalloc.get_traced_memory()[0] / 2**20
        tracemalloc.stop()
        del m
    out["ratio"] = out["now_ms"] / out["before_ms"]
    return {**out, **resumes(sessions, block)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=10_000)
    p.add_argument("--hashes", type=int, default=512)
    p.add_argument("--block", type=int, default=50, help="suspends a side takes in a row")
    a = p.parse_args()
    r = run(a.sessions, a.hashes, a.block)
    print(
        f"{a.sessions} x {a.hashes}, every session suspended, blocks of {a.block} alternating\n"
        f"| side | ms a suspend (median block) | MiB the suspends kept |\n|---|---|---|\n"
        f"| now (bulk steps, parked beside) | {r['now_ms']:.2f} | {r['now_mib']:.0f} |\n"
        f"| before (a bisect a hash, parked a dict) | {r['before_ms']:.2f} | "
        f"{r['before_mib']:.0f} |\n"
        f"now / before: {r['ratio']:.2f}x the time\n"
        f"resume (turn_end of a suspended session, its stored map): "
        f"{r['resume_bulk_ms']:.2f} ms unparked in bulk, {r['resume_per_hash_ms']:.2f} ms "
        f"a hash at a time ({r['resume_ratio']:.2f}x)"
    )


if __name__ == "__main__":
    main()
