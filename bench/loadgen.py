"""A small closed-loop HTTP/1.1 load generator on raw asyncio streams (keep-alive, JSON POST).

Written by hand rather than using aiohttp's client because the generator must be cheaper per
request than the servers it measures; a raw protocol is about 3x cheaper here.

As a process (``python -m bench.loadgen HOST PORT --bodies FILE --rate R``) the requests are
encoded once before the clock starts and the generator can run niced, so that on a small
machine it takes as little as possible of the cores the measured processes run on; it
reports the CPU it used.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import sys
import time
from collections.abc import Callable


def build_request(host: str, port: int, path: str, body: bytes) -> bytes:
    """One POST request with a JSON body."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One HTTP/1.1 response with a Content-Length: its status line and its body."""
    status_line = await reader.readline()
    length = 0
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        if line[:15].lower() == b"content-length:":
            length = int(line[15:].strip())
    return status_line, await reader.readexactly(length)


async def _worker(
    host: str,
    port: int,
    request_for: Callable[[int], bytes],
    deadline: float,
    latencies: list[float],
    errors: list[int],
    worker_id: int,
    rate_per_worker: float | None,
    phase: float = 0.0,
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    i = 0
    next_at = time.perf_counter()
    if rate_per_worker:
        # Spread the workers over one period: in step they would send bursts of
        # `concurrency` requests and measure queueing the target rate does not cause.
        next_at += phase / rate_per_worker
    try:
        while True:
            now = time.perf_counter()
            if now >= deadline:
                return
            if rate_per_worker:
                if next_at > now:
                    await asyncio.sleep(next_at - now)
                next_at += 1.0 / rate_per_worker
            req = request_for(worker_id * 1_000_000 + i)
            i += 1
            t0 = time.perf_counter()
            writer.write(req)
            status_line, payload = await read_response(reader)
            latencies.append(time.perf_counter() - t0)
            ok = b'"ok": true' in payload or b'"ok":true' in payload
            if b" 200 " not in status_line or not ok:
                errors.append(1)
    finally:
        writer.close()


async def run_load(
    host: str,
    port: int,
    bodies: Callable[[int], bytes],
    *,
    concurrency: int,
    seconds: float,
    path: str = "/event",
    rate: float | None = None,
    encoded: bool = False,
) -> dict[str, float]:
    """Drive ``concurrency`` keep-alive connections for ``seconds``; return rate and latencies.

    ``encoded``: ``bodies`` gives whole requests (build_request's), not JSON bodies.
    """

    def request_for(i: int) -> bytes:
        return build_request(host, port, path, bodies(i))

    latencies: list[float] = []
    errors: list[int] = []
    start = time.perf_counter()
    deadline = start + seconds
    per_worker = rate / concurrency if rate else None
    await asyncio.gather(
        *(
            _worker(
                host,
                port,
                bodies if encoded else request_for,
                deadline,
                latencies,
                errors,
                w,
                per_worker,
                w / concurrency,
            )
            for w in range(concurrency)
        )
    )
    elapsed = time.perf_counter() - start
    latencies.sort()
    n = len(latencies)

    def pct(p: float) -> float:
        return latencies[min(n - 1, int(p * n))] * 1000 if n else float("nan")

    return {
        "requests": n,
        "errors": len(errors),
        "seconds": elapsed,
        "rps": n / elapsed,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "p999_ms": pct(0.999),
    }


def main() -> None:
    """CLI: ``loadgen.py HOST PORT (JSON_BODY | --bodies FILE)``; prints one JSON object
    (rate, latencies, ``cpu_s``: the generator's own CPU seconds, ``ended_at``: time.time()
    when the last answer came)."""
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("body", nargs="?")
    p.add_argument("--bodies", help="a file of JSON bodies, one a line, sent in turn")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--rate", type=float, help="requests/s in all (default: as fast as it can)")
    p.add_argument("--nice", type=int, default=0, help="lower this process's priority by N")
    a = p.parse_args()
    if a.nice:
        os.nice(a.nice)
    if a.bodies:
        with open(a.bodies, "rb") as fh:
            bodies = [line.rstrip(b"\n") for line in fh if line.strip()]
    else:
        bodies = [a.body.encode()]
    requests = [build_request(a.host, a.port, "/event", b) for b in bodies]  # before the clock
    turn = itertools.count()  # one order over all workers: each request the next body
    res = asyncio.run(
        run_load(
            a.host,
            a.port,
            lambda _i: requests[next(turn) % len(requests)],
            concurrency=a.concurrency,
            seconds=a.seconds,
            rate=a.rate,
            encoded=True,
        )
    )
    res["ended_at"] = time.time()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    res["cpu_s"] = usage.ru_utime + usage.ru_stime
    json.dump(res, sys.stdout)
    print()


if __name__ == "__main__":
    main()
