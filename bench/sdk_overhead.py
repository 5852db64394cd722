"""SDK overhead: what a fire-and-forget call costs the caller, against a no-op call.

Times each call with perf_counter_ns (the no-op baseline is timed the same way, so the
timer's own cost cancels), daemon up (a real daemon) and down (a closed port), in bursts of
1000 calls with a flush between bursts so the queue never fills.
Run: ``.venv/bin/python -m bench.sdk_overhead [BURSTS]``.
"""

from __future__ import annotations

import statistics
import sys
import time

from bench.procs import daemon, free_port
from ramakv_sdk.global_client import BackgroundClient

HASHES = {"chunk_hashes": [f"{i:x}" for i in range(64)]}


def noop(session_id: str) -> None:
    return None


def timed(fn, arg: str, n: int) -> list[int]:  # noqa: ANN001
    out = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        fn(arg)
        out.append(clock() - t0)
    return out


def run(url: str, label: str, bursts: int) -> None:
    client = BackgroundClient(url, retry_for=0.5)

    def turn_start(sid: str) -> None:
        client.emit({"type": "turn_start", "session_id": sid})

    def turn_end(sid: str) -> None:
        from ramakv_sdk import events

        client.emit(events.turn_end(sid, HASHES))

    turn_start("warm-up")
    client.flush(10)
    base: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    for b in range(bursts):
        base += timed(noop, f"s{b}", 1000)
        starts += timed(turn_start, f"s{b}", 1000)
        ends += timed(turn_end, f"s{b}", 1000)
        client.flush(30)
    b50 = statistics.median(base)
    for name, xs in (("turn_start", starts), ("turn_end (64 hashes)", ends)):
        xs.sort()
        print(f"daemon {label:4} {name:21} p50 {(statistics.median(xs) - b50) / 1e3:5.2f} us  "
              f"p99 {(xs[int(len(xs) * 0.99)] - b50) / 1e3:6.2f} us  (no-op call p50 "
              f"{b50 / 1e3:.2f} us)")
    print(f"daemon {label:4} counters {client.stats.as_dict()}")
    client.close(5)


def main() -> None:
    bursts = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    with daemon() as (port, _):
        run(f"http://127.0.0.1:{port}", "up", bursts)
    run(f"http://127.0.0.1:{free_port()}", "down", bursts)


if __name__ == "__main__":
    main()
