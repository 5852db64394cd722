"""Event throughput and latency: the real daemon against a bare aiohttp server, same load."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from bench.loadgen import run_load
from bench.procs import bare_server, daemon

SESSIONS = 256
SYSTEM_PREFIX = [f"sys-{i}" for i in range(8)]


def turn_end_body(i: int) -> bytes:
    """64 hashes: a shared 8-chunk system prefix, then 56 of which 28 repeat the last turn's."""
    s, turn = i % SESSIONS, i // SESSIONS
    own = [f"s{s}-c{k}" for k in range(turn * 28, turn * 28 + 56)]
    return json.dumps({
        "type": "turn_end", "session_id": f"bench-{s}",
        "kv_transfer_params": {"chunk_hashes": SYSTEM_PREFIX + own},
    }).encode()


def turn_start_body(i: int) -> bytes:
    """turn_start of one of the sessions."""
    return json.dumps({"type": "turn_start", "session_id": f"bench-{i % SESSIONS}"}).encode()


def health_body(i: int) -> bytes:
    """health."""
    return b'{"type":"health"}'


WORKLOADS: dict[str, Callable[[int], bytes]] = {
    "turn_end": turn_end_body, "turn_start": turn_start_body, "health": health_body,
}


def run(seconds: float = 5.0, rounds: int = 2, concurrency: int = 32) -> dict:
    """Alternate bare and daemon runs per workload; report rates, latencies and ratios."""
    out: dict = {}
    with bare_server() as bare_port, daemon() as (daemon_port, _):
        for name, bodies in WORKLOADS.items():
            bare_runs, daemon_runs = [], []
            for _ in range(rounds):
                bare_runs.append(asyncio.run(run_load(
                    "127.0.0.1", bare_port, bodies, concurrency=concurrency, seconds=seconds)))
                daemon_runs.append(asyncio.run(run_load(
                    "127.0.0.1", daemon_port, bodies, concurrency=concurrency, seconds=seconds)))
            bare = max(bare_runs, key=lambda r: r["rps"])
            dmn = max(daemon_runs, key=lambda r: r["rps"])
            half = asyncio.run(run_load(
                "127.0.0.1", daemon_port, bodies, concurrency=concurrency,
                seconds=seconds, rate=dmn["rps"] / 2))
            out[name] = {
                "bare": bare, "daemon": dmn, "daemon_half_rate": half,
                "ratio": dmn["rps"] / bare["rps"],
            }
    return out


def table(res: dict) -> str:
    """Markdown table of a run() result."""
    lines = [
        "| workload | bare ev/s | daemon ev/s | ratio | p50 ms | p99 ms | p99.9 ms "
        "| p99 @ half rate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in res.items():
        d = r["daemon"]
        lines.append(
            f"| {name} | {r['bare']['rps']:.0f} | {d['rps']:.0f} | {r['ratio']:.2f} | "
            f"{d['p50_ms']:.2f} | {d['p99_ms']:.2f} | {d['p999_ms']:.2f} | "
            f"{r['daemon_half_rate']['p99_ms']:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    result = run()
    print(table(result))
