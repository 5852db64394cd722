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


def run(url: str, label: str, bursts: int) -> dict:
    client = BackgroundClient(url, retry_for=0.5)

    def turn_start(sid: str) -> None:
        client.emit({"type": "turn_start", "session_id": sid})

    def turn_end(sid: str) -> None:
        from ramakv_sdk import payloads

        client.emit(payloads.turn_end(sid, HASHES))

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
    out: dict = {"noop_call_p50_us": b50 / 1e3}
    for name, xs in (("turn_start", starts), ("turn_end_64", ends)):
        xs.sort()
        out[name] = {
            "p50_us": (statistics.median(xs) - b50) / 1e3,
            "p99_us": (xs[int(len(xs) * 0.99)] - b50) / 1e3,
        }
        print(
            f"daemon {label:4} {name:12} p50 {out[name]['p50_us']:5.2f} us  "
            f"p99 {out[name]['p99_us']:6.2f} us  (no-op call p50 {b50 / 1e3:.2f} us)"
        )
    out["counters"] = client.stats.as_dict()
    print(f"daemon {label:4} counters {out['counters']}")
    client.close(5)
    return out


def collect(bursts: int = 10) -> dict:
    """Caller-side cost with the daemon up and down."""
    with daemon() as (port, _):
        up = run(f"http://127.0.0.1:{port}", "up", bursts)
    down = run(f"http://127.0.0.1:{free_port()}", "down", bursts)
    return {"up": up, "down": down}


def main() -> None:
    collect(int(sys.argv[1]) if len(sys.argv) > 1 else 20)


if __name__ == "__main__":
    main()
