"""Event-loop stall of one admin read at scale: chunk_info in one piece vs in slices.

Usage: python -m bench.admin_stall [--sessions 20000] [--refs 100]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from ramakv_daemon.adapters.backends.noop import NoopBackend
from ramakv_daemon.adapters.sqlite_store import SqliteSessionStore
from ramakv_daemon.config import Config
from ramakv_daemon.core.session import Session
from ramakv_daemon.service import EventService


async def _max_stall(work: Any) -> tuple[float, float]:
    """(longest gap between loop ticks, total time) while ``work()`` runs, in ms."""
    gaps: list[float] = []
    done = False

    async def ticker() -> None:
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    t0 = time.perf_counter()
    await work()
    total = time.perf_counter() - t0
    done = True
    await task
    return max(gaps) * 1000, total * 1000


async def measure(sessions: int = 20000, refs: int = 100) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "s.db")
        svc = EventService(Config(session_store_path=path, noop_backend=True),
                           SqliteSessionStore(path), NoopBackend())
        await svc.start()
        shared = [f"{i:016x}" for i in range(refs // 2)]
        svc.manager.load([
            Session(f"s{i}", tuple(shared + [f"{i:08x}{k:08x}" for k in range(refs - len(shared))]))
            for i in range(sessions)
        ])
        target = [shared[0]]

        async def one_piece() -> None:  # what chunk_info did before: holders_of in one go
            svc.manager.holders_of(target)

        async def sliced() -> None:
            status, body = await svc.handle({"type": "chunk_info", "chunk_hashes": target})
            assert status == 200 and len(body["data"]["chunks"][target[0]]["holders"]) == sessions

        before = [await _max_stall(one_piece) for _ in range(3)]
        after = [await _max_stall(sliced) for _ in range(3)]
        await svc.stop()
    return {
        "sessions": sessions, "references": sessions * refs,
        "stall_ms_before": min(b[0] for b in before), "stall_ms_after": min(a[0] for a in after),
        "total_ms_before": min(b[1] for b in before), "total_ms_after": min(a[1] for a in after),
    }


def table(res: dict[str, Any]) -> str:
    return (
        f"chunk_info of one hash held by every session, {res['sessions']:,} sessions / "
        f"{res['references']:,} references (best of 3):\n\n"
        "| | longest loop stall ms | whole read ms |\n|---|---|---|\n"
        f"| one piece (before) | {res['stall_ms_before']:.1f} | {res['total_ms_before']:.1f} |\n"
        f"| in slices (now) | {res['stall_ms_after']:.1f} | {res['total_ms_after']:.1f} |\n"
        f"\nstall ratio now/before: {res['stall_ms_after'] / res['stall_ms_before']:.2f}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sessions", type=int, default=20000)
    p.add_argument("--refs", type=int, default=100)
    a = p.parse_args()
    print(table(asyncio.run(measure(a.sessions, a.refs))))


if __name__ == "__main__":
    main()
