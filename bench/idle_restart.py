"""Client latency while the idle policies catch up after a restart: a store of N sessions last
active long ago (a daemon down overnight), the daemon started on it (noop backend), health and
turn_end sent at a steady pace from the moment it listens; p50/p99 during the first idle sweep
(which suspends every session) against the steady state after it, and the sweep's duration.

    python -m bench.idle_restart [--sessions 3000,10000] [--hashes 128] [--steady 30]
        [--overdue 1.0] [--daemon-root PATH] [--record SECTION]
    --overdue: the share of sessions past idle_suspend_s (the rest active in the last minute);
    --daemon-root: another checkout's daemon, for a before/after comparison;
    --record: write this run to bench/results/latest.{json,md} as section SECTION.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.loadgen import build_request, read_response
from bench.procs import free_port
from bench.sections import now_utc, record_run
from bench.startup import (
    STORE_DIR,
    child_env,
    pct,
    probe_bodies,
    start_daemon,
    stop,
    wait_listening,
)
from bench.startup_store import build

RESULTS = Path(__file__).resolve().parent / "results"
SHARED = 64  # hashes every session shares (a system prompt)
OLDEST_S, NEWEST_S = 14 * 3600.0, 400.0  # last activity: all past idle_suspend_s (300)
RATE = 50.0  # each probe's events per second (health and turn_end, a connection each)
SWEEP_TIMEOUT_S = 900.0
METRICS_POLL_S = 0.25  # how often /metrics is read, during the sweep (to see it end) and after
RECENT_S = 60.0  # a session not overdue was last active this recently (due after 240 s+)


def overdue_store(path: Path, n_sessions: int, hashes: int, overdue: float = 1.0) -> Path:
    """The start-up benchmark's store (built once under STORE_DIR) copied to ``path``; a share
    ``overdue`` of its sessions last active 400 s to 14 h ago, the rest in the last minute."""
    cached = build(
        STORE_DIR / f"ramakv-idle-{n_sessions}x{hashes}.db",
        n_sessions,
        shared=SHARED,
        own=hashes - SHARED,
    )
    path.write_bytes(cached.read_bytes())
    now, rnd = time.time(), random.Random(7)
    con = sqlite3.connect(path)
    try:
        ids = [r[0] for r in con.execute("SELECT session_id FROM sessions")]
        con.executemany(
            "INSERT OR REPLACE INTO session_state (session_id, suspended, last_event_ts, "
            "namespace) VALUES (?, 0, ?, '')",
            [
                (
                    sid,
                    now - rnd.uniform(NEWEST_S, OLDEST_S)
                    if rnd.random() < overdue
                    else now - rnd.uniform(0.0, RECENT_S),
                )
                for sid in ids
            ],
        )
        con.commit()
    finally:
        con.close()
    return path


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> bytes:
    writer.write(request)
    return (await read_response(reader))[1]


async def _probe(
    port: int, bodies: list[bytes], stop_at: asyncio.Event, out: list[tuple[float, float]]
) -> None:
    """One keep-alive connection sending RATE events/s until ``stop_at``: (sent at, latency)
    per event. A late answer delays the next send, never the schedule."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = time.perf_counter()
    try:
        i = 0
        while not stop_at.is_set():
            at = t0 + i / RATE
            if (wait := at - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            sent = time.perf_counter()
            req = build_request("127.0.0.1", port, "/event", bodies[i % len(bodies)])
            body = await _exchange(reader, writer, req)
            if b'"ok":true' not in body.replace(b" ", b""):
                raise RuntimeError(f"event failed: {body[:200]!r}")
            out.append((sent, time.perf_counter() - sent))
            i = max(i + 1, int((time.perf_counter() - t0) * RATE))
    finally:
        writer.close()


async def _sweep_done(port: int) -> tuple[float, float, int]:
    """Polls GET /metrics until the first idle sweep has ended: (when it was seen ended,
    the sweep's own seconds, sessions suspended)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    deadline = time.perf_counter() + SWEEP_TIMEOUT_S
    get = f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    try:
        while time.perf_counter() < deadline:
            text = (await _exchange(reader, writer, get)).decode()
            count = re.search(r"^ramakv_idle_sweep_seconds_count (\S+)", text, re.M)
            if count and float(count.group(1)) >= 1:
                total = re.search(r"^ramakv_idle_sweep_seconds_sum (\S+)", text, re.M)
                done = re.findall(
                    r'^ramakv_idle_policy_sessions_total\{[^}]*action="suspend"[^}]*\} (\S+)',
                    text,
                    re.M,
                )
                assert total is not None
                return time.perf_counter(), float(total.group(1)), int(sum(map(float, done)))
            await asyncio.sleep(METRICS_POLL_S)
    finally:
        writer.close()
    raise RuntimeError("the idle sweep did not end in time")


async def _scrape(port: int, stop_at: asyncio.Event) -> None:
    """GET /metrics every METRICS_POLL_S until ``stop_at``: the steady window carries the
    load that watching the sweep put on the window during it (a fair side by side)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    get = f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    try:
        while not stop_at.is_set():
            await _exchange(reader, writer, get)
            await asyncio.sleep(METRICS_POLL_S)
    finally:
        writer.close()


async def _measure(port: int, bodies: list[bytes], steady_s: float) -> dict[str, Any]:
    health = [b'{"type":"health"}']
    stop_at = asyncio.Event()
    got: dict[str, list[tuple[float, float]]] = {"health": [], "turn_end": []}
    t0 = time.perf_counter()
    probes = [
        asyncio.create_task(_probe(port, health, stop_at, got["health"])),
        asyncio.create_task(_probe(port, bodies, stop_at, got["turn_end"])),
    ]
    ended, sweep_s, suspended = await _sweep_done(port)
    probes.append(asyncio.create_task(_scrape(port, stop_at)))
    await asyncio.sleep(steady_s)
    stop_at.set()
    await asyncio.gather(*probes)
    out: dict[str, Any] = {"sweep_s": sweep_s, "sweep_seen_s": ended - t0, "suspended": suspended}
    for kind, lat in got.items():
        during = [x for at, x in lat if at < ended]
        # The steady state: after the sweep, from a second on (its last commits settled).
        after = [x for at, x in lat if at >= ended + 1.0]
        r = {
            "during_n": len(during),
            "during_p50_ms": pct(during, 0.5),
            "during_p99_ms": pct(during, 0.99),
            "during_max_ms": pct(during, 1.0),
            "steady_n": len(after),
            "steady_p50_ms": pct(after, 0.5),
            "steady_p99_ms": pct(after, 0.99),
        }
        r["p99_ratio"] = r["during_p99_ms"] / r["steady_p99_ms"]
        r["p50_ratio"] = r["during_p50_ms"] / r["steady_p50_ms"]
        out[kind] = r
    return out


def one_case(
    n_sessions: int,
    hashes: int,
    steady_s: float,
    root: Path | None = None,
    overdue: float = 1.0,
) -> dict[str, Any]:
    """A fresh daemon on an overdue store of ``n_sessions`` x ``hashes``: the latencies
    during its first idle sweep and after it."""
    with tempfile.TemporaryDirectory(prefix="ramakv-idle-restart-", dir=STORE_DIR) as d:
        store = overdue_store(Path(d) / "sessions.db", n_sessions, hashes, overdue)
        bodies = probe_bodies(store, min(200, n_sessions), turns=20)
        t0 = time.perf_counter()
        if root is None:
            proc, port = start_daemon(store, Path(d))
        else:
            proc, port = _start_elsewhere(root, store, Path(d))
        try:
            listening = wait_listening(proc, port, t0)
            res = asyncio.run(_measure(port, bodies, steady_s))
        finally:
            stop(proc)
    return {"sessions": n_sessions, "hashes": hashes, "listening_s": listening, **res}


def _start_elsewhere(root: Path, store: Path, tmp: Path) -> tuple[subprocess.Popen, int]:
    """start_daemon's process run in another checkout (its daemon first on the path), for a
    before/after comparison."""
    port = free_port()
    cfg = tmp / "config.toml"
    cfg.write_text(
        f'listen_addr = "127.0.0.1:{port}"\nnoop_backend = true\nsession_store_path = "{store}"\n'
    )
    cmd = [sys.executable, "-m", "ramakv_daemon", "--config", str(cfg), "--log-level", "WARNING"]
    out = subprocess.DEVNULL
    return subprocess.Popen(cmd, cwd=root, stdout=out, stderr=out, env=child_env()), port


def run(
    sizes: tuple[int, ...] = (3000, 10000),
    hashes: int = 128,
    steady_s: float = 10.0,
    root: Path | None = None,
    overdue: float = 1.0,
) -> dict[str, Any]:
    """Every size, one daemon each."""
    cases = [one_case(n, hashes, steady_s, root, overdue) for n in sizes]
    return {"rate_per_probe": RATE, "overdue": overdue, "cases": cases}


def table(res: dict[str, Any]) -> str:
    lines = [
        f"Health and turn_end at {res['rate_per_probe']:.0f}/s each while the first idle sweep "
        f"suspends the stored sessions idle 400 s to 14 h ({res.get('overdue', 1.0):.0%} of "
        "them), against the steady state after it; sweep s: the sweep's own duration.",
        "",
        "| sessions x hashes | sweep s | suspended | event | during p50 / p99 ms | "
        "steady p50 / p99 ms | p99 during / steady |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in res["cases"]:
        for kind in ("health", "turn_end"):
            r = c[kind]
            lines.append(
                f"| {c['sessions']} x {c['hashes']} | {c['sweep_s']:.1f} | {c['suspended']} | "
                f"{kind} | {r['during_p50_ms']:.1f} / {r['during_p99_ms']:.1f} | "
                f"{r['steady_p50_ms']:.1f} / {r['steady_p99_ms']:.1f} | {r['p99_ratio']:.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.idle_restart")
    p.add_argument("--sessions", default="3000,10000")
    p.add_argument("--hashes", type=int, default=128)
    # 30 s: ~3,000 events a probe, so the steady p99 is not the tail of 10 samples (a 10 s
    # window read 2.3-3.9 ms on the same daemon from run to run).
    p.add_argument("--steady", type=float, default=30.0, help="seconds measured after the sweep")
    p.add_argument("--overdue", type=float, default=1.0, help="share of sessions overdue")
    p.add_argument("--daemon-root", type=Path, default=None)
    p.add_argument("--record", default="", help="results section to write this run to")
    args = p.parse_args()
    sizes = tuple(int(x) for x in args.sessions.split(","))
    t0, started, load = time.perf_counter(), now_utc(), os.getloadavg()
    res = run(sizes, args.hashes, args.steady, args.daemon_root, args.overdue)
    text = table(res)
    print(text, flush=True)
    if args.record:
        record_run(RESULTS, args.record, res, text, started=started, loadavg_start=load, since=t0)


if __name__ == "__main__":
    main()
