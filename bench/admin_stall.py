"""Event-loop stall of one admin read at scale: in one piece (before) vs in slices (now).

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
from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.bootstrap import build
from ramakv_daemon.config import Config
from ramakv_daemon.core.session import Session
from ramakv_daemon.handlers.list_sessions import ListSessions, list_sessions


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
        svc = build(
            Config(session_store_path=path, noop_backend=True),
            SqliteSessionStore(path),
            NoopBackend(),
        )
        await svc.start()
        shared = [f"{i:016x}" for i in range(refs // 2)]
        svc.default.manager.load(
            [
                Session(
                    f"s{i}", tuple(shared + [f"{i:08x}{k:08x}" for k in range(refs - len(shared))])
                )
                for i in range(sessions)
            ]
        )
        target = [shared[0]]

        async def chunk_info_one_piece() -> None:  # what chunk_info did: holders_of at once
            svc.default.manager.holders_of(target)

        async def chunk_info_sliced() -> None:
            status, body = await svc.handle({"type": "chunk_info", "chunk_hashes": target})
            assert status == 200 and len(body["data"]["chunks"][target[0]]["holders"]) == sessions

        async def list_sessions_one_piece() -> None:  # the same work, no yield in between
            for _ in list_sessions(svc.default.ctx, ListSessions(offset=sessions - 1000), 0.0):
                pass

        async def list_sessions_sliced() -> None:
            status, body = await svc.handle({"type": "list_sessions", "offset": sessions - 1000})
            assert status == 200 and len(body["data"]["sessions"]) == 1000

        out: dict[str, Any] = {"sessions": sessions, "references": sessions * refs}
        for name, before_fn, after_fn in (
            ("chunk_info", chunk_info_one_piece, chunk_info_sliced),
            ("list_sessions", list_sessions_one_piece, list_sessions_sliced),
        ):
            before = [await _max_stall(before_fn) for _ in range(3)]
            after = [await _max_stall(after_fn) for _ in range(3)]
            out[name] = {
                "stall_ms_before": min(b[0] for b in before),
                "stall_ms_after": min(a[0] for a in after),
                "total_ms_before": min(b[1] for b in before),
                "total_ms_after": min(a[1] for a in after),
            }
        await svc.stop()
    return out


def table(res: dict[str, Any]) -> str:
    lines = [
        f"{res['sessions']:,} sessions / {res['references']:,} references, best of 3: "
        "chunk_info of one hash every session holds; list_sessions of the last 1000 rows.",
        "",
        "| read | stall ms before | stall ms now | ratio | whole read ms before | now |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("chunk_info", "list_sessions"):
        r = res[name]
        lines.append(
            f"| {name} | {r['stall_ms_before']:.1f} | {r['stall_ms_after']:.1f} | "
            f"{r['stall_ms_after'] / r['stall_ms_before']:.2f} | {r['total_ms_before']:.1f} | "
            f"{r['total_ms_after']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sessions", type=int, default=20000)
    p.add_argument("--refs", type=int, default=100)
    a = p.parse_args()
    print(table(asyncio.run(measure(a.sessions, a.refs))))


if __name__ == "__main__":
    main()
