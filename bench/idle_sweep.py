"""Event-loop stall of the idle policies' sweep at scale: in slices and batches (as the daemon
runs it) against one piece (every session looked at, then every event sent at once).

Each side gets a fresh daemon on its own SQLite file with the same sessions: a share idle
past idle_close_s, a share past idle_suspend_s, the rest fresh. The longest gap between two
ticks of a task that only yields is the longest time nothing else (an HTTP request, an
event) could run. A second measure is a sweep with nothing due (the steady state).

Usage: python -m bench.idle_sweep [--sessions 50000] [--refs 64]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ramakv_daemon.adapters.backends.noop import NoopBackend
from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.bootstrap import build
from ramakv_daemon.bus.commands import ActIdle
from ramakv_daemon.config import Config
from ramakv_daemon.core.session import Session
from ramakv_daemon.sweeps.idle_policy import BATCH, SLICE, IdlePolicy, SweepResult

SUSPEND_S, CLOSE_S = 300.0, 86400.0
NOW = 1_000_000_000.0


async def max_stall(work: Callable[[], Awaitable[Any]]) -> tuple[float, float, Any, float, float]:
    """(longest gap between loop ticks in ms, total ms, work's result, p99 gap in ms, the
    longest gap in CPU ms of this thread: what the loop itself did, without the time the
    OS gave other processes on a shared machine)."""
    gaps: list[float] = []
    cpu_gaps: list[float] = []
    done = False

    async def ticker() -> None:
        last, last_cpu = time.perf_counter(), time.thread_time()
        while not done:
            await asyncio.sleep(0)
            now, cpu = time.perf_counter(), time.thread_time()
            gaps.append(now - last)
            cpu_gaps.append(cpu - last_cpu)
            last, last_cpu = now, cpu

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    t0 = time.perf_counter()
    result = await work()
    total = time.perf_counter() - t0
    done = True
    await task
    gaps.sort()
    p99 = gaps[int(len(gaps) * 0.99)] * 1000
    return gaps[-1] * 1000, total * 1000, result, p99, max(cpu_gaps) * 1000


def population(sessions: int, refs: int) -> list[Session]:
    """10 % idle past the close, 40 % past the suspend, 50 % fresh; half of each map shared."""
    shared = [f"{i:016x}" for i in range(refs // 2)]
    out = []
    for i in range(sessions):
        kind = i % 10
        age = CLOSE_S + 60 if kind == 0 else SUSPEND_S + 60 if kind <= 4 else 10.0
        own = [f"{i:08x}{k:08x}" for k in range(refs - len(shared))]
        out.append(Session(f"s{i}", tuple(shared + own), last_event_ts=NOW - age))
    return out


async def one_side(
    sessions: int, refs: int, slice_size: int, batch: int, by_host: bool = False
) -> dict[str, Any]:
    """One fresh daemon: the sweep (or, ``by_host``, the same events sent by a host through
    the service, ``batch`` at a time), then a sweep with nothing due."""
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "s.db")
        config = Config(
            session_store_path=path,
            noop_backend=True,
            idle_suspend_s=SUSPEND_S,
            idle_close_s=CLOSE_S,
        )
        daemon = build(config, SqliteSessionStore(path), NoopBackend(), clock=lambda: NOW)
        await daemon.start()
        await daemon.idle_sweep.close()  # the bench runs the sweeps itself
        people = population(sessions, refs)
        daemon.default.manager.load(people)
        # As the daemon's process does after start-up (ramakv_daemon.__main__._tune_gc).
        gc.freeze()
        threshold = gc.get_threshold()
        gc.set_threshold(7000, 10, 10)
        # The daemon's own sweep (batched through the bus: ActIdle), sliced as asked.
        sweep = daemon.idle_sweep
        sweep.slice_size, sweep.batch = slice_size, batch
        if slice_size >= sessions:  # one piece: every due event in one batch, one step
            acting = daemon.bus.handlers[ActIdle]
            acting.max_batch, acting.step_cpu_s = sessions, math.inf  # type: ignore[attr-defined]

        async def host() -> SweepResult:
            due = sweep._due(daemon.default, IdlePolicy(SUSPEND_S, CLOSE_S), list(people_ids), NOW)
            out = SweepResult(looked_at=len(people_ids))
            for i in range(0, len(due), batch):
                answers = await asyncio.gather(
                    *(
                        daemon.handle({"type": t, "session_id": sid})
                        for t, sid, _ in due[i : i + batch]
                    )
                )
                for (t, _, _), (_, body) in zip(due[i : i + batch], answers, strict=True):
                    if t == "session_close":
                        out.closed += bool(body["data"]["closed"])
                    else:
                        out.suspended += bool(body["data"]["suspended"])
            return out

        people_ids = [p.session_id for p in people]
        stall, total, did, p99, cpu = await max_stall(host if by_host else sweep.sweep)
        idle_stall, idle_total, again, _, idle_cpu = await max_stall(sweep.sweep)
        await daemon.stop()
        gc.set_threshold(*threshold)
        gc.unfreeze()
    assert again.suspended == again.closed == 0
    return {
        "stall_ms": stall,
        "p99_gap_ms": p99,
        "stall_cpu_ms": cpu,
        "sweep_ms": total,
        "suspended": did.suspended,
        "closed": did.closed,
        "failed": did.failed,
        "events_per_s": (did.suspended + did.closed) / (total / 1000),
        "nothing_due_stall_ms": idle_stall,
        "nothing_due_stall_cpu_ms": idle_cpu,
        "nothing_due_sweep_ms": idle_total,
    }


async def measure(sessions: int = 50000, refs: int = 64) -> dict[str, Any]:
    """Both sides on the same population."""
    return {
        "sessions": sessions,
        "refs": refs,
        "slice": SLICE,
        "batch": BATCH,
        "sliced": await one_side(sessions, refs, SLICE, BATCH),
        "one_piece": await one_side(sessions, refs, sessions, sessions),
        "by_host": await one_side(sessions, refs, SLICE, BATCH, by_host=True),
    }


def table(res: dict[str, Any]) -> str:
    s, o, h = res["sliced"], res["one_piece"], res["by_host"]
    lines = [
        f"{res['sessions']:,} sessions x {res['refs']} chunks on SQLite: 10 % idle past "
        f"idle_close_s, 40 % past idle_suspend_s; {s['suspended']:,} suspends and "
        f"{s['closed']:,} closes through the event pipeline. Sliced = {res['slice']} sessions "
        f"a loop step, its due events in batches of one short step each (the daemon's "
        f"ActIdle); one piece = all at once, one batch; by a host = the same events sent "
        f"to the service {res['batch']} at a time.",
        "",
        "| sweep | longest loop stall ms (CPU ms) | p99 gap ms | sweep ms | events/s | "
        "stall with nothing due ms (CPU ms) |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in (("sliced (daemon)", s), ("one piece", o), ("by a host", h)):
        lines.append(
            f"| {name} | {r['stall_ms']:.1f} ({r['stall_cpu_ms']:.1f}) | {r['p99_gap_ms']:.2f} | "
            f"{r['sweep_ms']:.0f} | {r['events_per_s']:.0f} | {r['nothing_due_stall_ms']:.1f} "
            f"({r['nothing_due_stall_cpu_ms']:.1f}) |"
        )
    lines.append("")
    lines.append(
        f"Longest stall, sliced / one piece: {s['stall_ms'] / o['stall_ms']:.3f} (CPU "
        f"{s['stall_cpu_ms'] / o['stall_cpu_ms']:.3f}); sliced / by a host: "
        f"{s['stall_ms'] / h['stall_ms']:.2f} (CPU {s['stall_cpu_ms'] / h['stall_cpu_ms']:.2f}). "
        "The wall figures include the time the OS gave other processes (a shared machine)."
    )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sessions", type=int, default=50000)
    p.add_argument("--refs", type=int, default=64)
    a = p.parse_args()
    print(table(asyncio.run(measure(a.sessions, a.refs))))


if __name__ == "__main__":
    main()
