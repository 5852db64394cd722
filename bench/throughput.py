"""Event throughput and latency: the real daemon against a bare aiohttp server, same load."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path

from bench.loadgen import run_load
from bench.procs import bare_server, daemon

SESSIONS = 256
SYSTEM_PREFIX = [f"sys-{i}" for i in range(8)]


PER_WORKER = 8  # sessions each load-generator connection owns (32 connections x 8 = 256)


def turn_end_body(i: int) -> bytes:
    """64 hashes: a shared 8-chunk system prefix, then 56 of which 28 repeat the last turn's.

    The load generator numbers requests ``worker * 1_000_000 + k``. Each connection owns
    its own sessions and sends their turns in order, so every turn really shares half its
    private chunks with the session's previous turn (28 added, 28 evicted): connections
    sharing sessions would interleave far-apart turns and evict all 56 each time.
    """
    worker, k = divmod(i, 1_000_000)
    s, turn = (worker * PER_WORKER + k % PER_WORKER) % SESSIONS, k // PER_WORKER
    own = [f"s{s}-c{k}" for k in range(turn * 28, turn * 28 + 56)]
    return json.dumps(
        {
            "type": "turn_end",
            "session_id": f"bench-{s}",
            "kv_transfer_params": {"chunk_hashes": SYSTEM_PREFIX + own},
        }
    ).encode()


def turn_start_body(i: int) -> bytes:
    """turn_start of one of the sessions."""
    return json.dumps({"type": "turn_start", "session_id": f"bench-{i % SESSIONS}"}).encode()


def health_body(i: int) -> bytes:
    """health."""
    return b'{"type":"health"}'


WORKLOADS: dict[str, Callable[[int], bytes]] = {
    "turn_end": turn_end_body,
    "turn_start": turn_start_body,
    "health": health_body,
}


def run(
    seconds: float = 5.0,
    rounds: int = 2,
    concurrency: int = 32,
    only: list[str] | None = None,
    before: Path | None = None,
    floor: bool = False,
) -> dict:
    """Alternate bare and daemon runs per workload; report rates, latencies and ratios.
    ``only``: these workloads (default: every one); ``before``: another checkout whose
    daemon runs too, its full-rate rounds interleaved with the others (a before/after
    comparison under the same load of the machine); ``floor``: bench.floor_server's
    full-rate rounds too (the least a durable turn_end costs on aiohttp and SQLite)."""
    out: dict = {}
    workloads = {k: v for k, v in WORKLOADS.items() if only is None or k in only}
    with contextlib.ExitStack() as stack:
        bare_port = stack.enter_context(bare_server())
        daemon_port, _ = stack.enter_context(daemon())
        before_port = stack.enter_context(daemon(root=before))[0] if before else None
        floor_port = stack.enter_context(bare_server("bench.floor_server")) if floor else None
        for name, bodies in workloads.items():
            bare_runs, daemon_runs, before_runs, floor_runs = [], [], [], []
            for _ in range(rounds):
                if floor_port is not None:
                    floor_runs.append(
                        asyncio.run(
                            run_load(
                                "127.0.0.1",
                                floor_port,
                                bodies,
                                concurrency=concurrency,
                                seconds=seconds,
                            )
                        )
                    )
                if before_port is not None:
                    before_runs.append(
                        asyncio.run(
                            run_load(
                                "127.0.0.1",
                                before_port,
                                bodies,
                                concurrency=concurrency,
                                seconds=seconds,
                            )
                        )
                    )
                bare_runs.append(
                    asyncio.run(
                        run_load(
                            "127.0.0.1", bare_port, bodies, concurrency=concurrency, seconds=seconds
                        )
                    )
                )
                daemon_runs.append(
                    asyncio.run(
                        run_load(
                            "127.0.0.1",
                            daemon_port,
                            bodies,
                            concurrency=concurrency,
                            seconds=seconds,
                        )
                    )
                )
            bare = max(bare_runs, key=lambda r: r["rps"])
            dmn = max(daemon_runs, key=lambda r: r["rps"])
            # Paced at half the daemon's best rate, the same load on both servers, rounds
            # interleaved: the median p99 of each, since one noisy second moves a tail.
            halves, bare_halves = [], []
            for _ in range(max(rounds, 3)):
                for port, runs in ((daemon_port, halves), (bare_port, bare_halves)):
                    runs.append(
                        asyncio.run(
                            run_load(
                                "127.0.0.1",
                                port,
                                bodies,
                                concurrency=concurrency,
                                seconds=seconds,
                                rate=dmn["rps"] / 2,
                            )
                        )
                    )
            half = _median_by_p99(halves)
            bare_half = _median_by_p99(bare_halves)
            out[name] = {
                "bare": bare,
                "daemon": dmn,
                "daemon_half_rate": half,
                "bare_half_rate": bare_half,
                "ratio": dmn["rps"] / bare["rps"],
            }
            if before_runs:
                prior = max(before_runs, key=lambda r: r["rps"])
                out[name]["before"] = prior
                out[name]["before_ratio"] = prior["rps"] / bare["rps"]
            if floor_runs:
                least = max(floor_runs, key=lambda r: r["rps"])
                out[name]["floor"] = least
                out[name]["floor_ratio"] = least["rps"] / bare["rps"]
    return out


def _median_by_p99(runs: list[dict]) -> dict:
    """The run whose p99 is the median one (its other figures come with it)."""
    return sorted(runs, key=lambda r: r["p99_ms"])[len(runs) // 2]


def table(res: dict) -> str:
    """Markdown table of a run() result."""
    lines = [
        "| workload | bare ev/s | daemon ev/s | ratio | p50 ms | p99 ms | p99.9 ms "
        "| p99 @ half rate | bare p99 @ same rate |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in res.items():
        d = r["daemon"]
        lines.append(
            f"| {name} | {r['bare']['rps']:.0f} | {d['rps']:.0f} | {r['ratio']:.2f} | "
            f"{d['p50_ms']:.2f} | {d['p99_ms']:.2f} | {d['p999_ms']:.2f} | "
            f"{r['daemon_half_rate']['p99_ms']:.2f} | {r['bare_half_rate']['p99_ms']:.2f} |"
        )
        if "before" in r:  # the other checkout's daemon, same run (no half-rate rounds)
            b = r["before"]
            lines.append(
                f"| {name} (before) | {r['bare']['rps']:.0f} | {b['rps']:.0f} | "
                f"{r['before_ratio']:.2f} | {b['p50_ms']:.2f} | {b['p99_ms']:.2f} | "
                f"{b['p999_ms']:.2f} | | |"
            )
        if "floor" in r:  # bench.floor_server: the least a durable turn_end costs
            f = r["floor"]
            lines.append(
                f"| {name} (durable floor) | {r['bare']['rps']:.0f} | {f['rps']:.0f} | "
                f"{r['floor_ratio']:.2f} | {f['p50_ms']:.2f} | {f['p99_ms']:.2f} | "
                f"{f['p999_ms']:.2f} | | |"
            )
    return "\n".join(lines)


def main() -> None:
    """python -m bench.throughput [--seconds S] [--rounds N] [--only W[,W]]
    [--daemon-root CHECKOUT] [--floor] [--record SECTION]."""
    import argparse
    import os
    import time

    from bench.sections import now_utc, record_run

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, default=5.0, help="each run (default 5)")
    p.add_argument("--rounds", type=int, default=2, help="bare/daemon pairs at full rate")
    p.add_argument("--only", help=f"comma-separated workloads of {', '.join(WORKLOADS)}")
    p.add_argument(
        "--daemon-root",
        type=Path,
        help="another checkout (e.g. main) whose daemon runs too, rounds interleaved",
    )
    p.add_argument(
        "--floor",
        action="store_true",
        help="run bench.floor_server too: the least a durable turn_end costs (its ratio "
        "bounds the daemon's)",
    )
    p.add_argument("--record", default="", help="results section to write this run to")
    a = p.parse_args()
    unknown = set(a.only.split(",")) - set(WORKLOADS) if a.only else set()
    if unknown:
        p.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
    only = a.only.split(",") if a.only else None
    t0, started, load = time.perf_counter(), now_utc(), os.getloadavg()
    result = run(a.seconds, a.rounds, only=only, before=a.daemon_root, floor=a.floor)
    text = table(result)
    print(text)
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores")
    if a.record:
        results = Path(__file__).resolve().parent / "results"
        record_run(results, a.record, result, text, started=started, loadavg_start=load, since=t0)


if __name__ == "__main__":
    main()
