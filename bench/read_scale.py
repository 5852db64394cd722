"""Operator reads at scale, in process: a protocol-2 trace snapshot and list_sessions pages on a
store of N sessions x 512 hashes (64 shared, the start-up benchmark's store) loaded as a
restart loads it (count arrays), with a share of the sessions suspended (as after the idle
sweep of an overdue store, issue 33), and a few new sessions' turns handled before the reads
(their hashes are counted outside the loaded arrays, as a running daemon's are). The first
snapshot is reported apart: it builds the count table's read indexes (what a console's
first connect after a restart pays).

    python -m bench.read_scale [--sessions 5000,20000] [--suspended 0.6] [--turns 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.startup import STORE_DIR
from bench.startup_store import build as build_store
from bench.startup_store import engine_hash
from ramakv_daemon.bootstrap import build
from ramakv_daemon.config import Config
from ramakv_daemon.trace.snapshot import freeze, messages


def _store(path: Path, n: int, suspended: float) -> None:
    cached = build_store(STORE_DIR / f"ramakv-startup-{n}.db", n)
    shutil.copyfile(cached, path)
    con = sqlite3.connect(path)
    try:
        ids = [r[0] for r in con.execute("SELECT session_id FROM sessions ORDER BY rowid")]
        rows = [
            (sid, int(bool(suspended) and (i % 10) < suspended * 10), time.time() - 60)
            for i, sid in enumerate(ids)
        ]
        con.executemany(
            "INSERT OR REPLACE INTO session_state (session_id, suspended, last_event_ts, "
            "namespace) VALUES (?, ?, ?, '')",
            rows,
        )
        con.commit()
    finally:
        con.close()


async def _measure(path: Path, n: int, repeat: int, turns: int) -> dict[str, Any]:
    config = Config(session_store_path=str(path), noop_backend=True, idle_suspend_s=0)
    d = build(config)
    await d.start()
    gc.freeze()
    try:
        for i in range(turns):  # 64 new hashes each: counted in the table's dict
            hashes = [engine_hash(os.urandom(8)) for _ in range(64)]
            _, body = await d.handle(
                {
                    "type": "turn_end",
                    "session_id": f"fresh-{i}",
                    "kv_transfer_params": {"chunk_hashes": hashes},
                }
            )
            assert body["ok"], body
        ns = d.namespaces
        snap: list[float] = []
        parts = 0
        for _ in range(repeat + 1):
            t0 = time.perf_counter()
            frozen = freeze(ns.managers, d.default.manager, d.trace.seq, d.trace.epoch)
            parts = 0
            async for _text in messages(frozen):
                parts += 1
            snap.append(time.perf_counter() - t0)
        pages: dict[str, float] = {}
        for limit in (100, 1000):
            last = max(0, n + turns - limit)
            for where, offset in (("first", 0), ("middle", n // 2), ("last", last)):
                took = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    _, body = await d.handle(
                        {"type": "list_sessions", "limit": limit, "offset": offset}
                    )
                    took.append(time.perf_counter() - t0)
                    assert body["ok"], body
                    assert len(body["data"]["sessions"]) == min(limit, n + turns - offset)
                pages[f"{limit}@{where}"] = statistics.median(took) * 1000
        return {
            "sessions": n,
            "turns": turns,
            "first_snapshot_s": snap[0],
            "snapshot_s": statistics.median(snap[1:]),
            "parts": parts,
            "list_ms": pages,
        }
    finally:
        gc.unfreeze()
        await d.stop()


def run(
    sizes: tuple[int, ...] = (5000, 20000),
    suspended: float = 0.6,
    repeat: int = 3,
    turns: int = 1000,
) -> dict:
    out: dict[str, Any] = {"suspended_share": suspended, "turns": turns, "cases": []}
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="ramakv-reads-", dir=STORE_DIR) as tmp:
            path = Path(tmp) / "sessions.db"
            _store(path, n, suspended)
            out["cases"].append(asyncio.run(_measure(path, n, repeat, turns)))
    return out


def table(res: dict[str, Any]) -> str:
    keys = list(res["cases"][0]["list_ms"]) if res["cases"] else []
    lines = [
        f"In process, store loaded as a restart loads it, {res['suspended_share']:.0%} of the "
        f"sessions suspended, then {res.get('turns', 0)} new sessions' turns of 64 new hashes; "
        "medians (the first snapshot apart).",
        "",
        "| sessions x 512 | first snapshot s | snapshot s | "
        + " | ".join(f"list {k} ms" for k in keys)
        + " |",
        "|---|---|---|" + "---|" * len(keys),
    ]
    for c in res["cases"]:
        cells = " | ".join(f"{c['list_ms'][k]:.1f}" for k in keys)
        first = c.get("first_snapshot_s")
        head = f"{first:.2f}" if first is not None else "-"
        lines.append(f"| {c['sessions']} | {head} | {c['snapshot_s']:.2f} | {cells} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.read_scale")
    p.add_argument("--sessions", default="5000,20000")
    p.add_argument("--suspended", type=float, default=0.6)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--turns", type=int, default=1000)
    args = p.parse_args()
    sizes = tuple(int(x) for x in args.sessions.split(","))
    print(table(run(sizes, args.suspended, args.repeat, args.turns)))


if __name__ == "__main__":
    main()
