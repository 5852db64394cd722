"""Proxy overhead: ramakv-proxy vs talking to the stand-in engine directly, same run.

Three processes (stand-in engine, real daemon, ramakv-proxy); requests alternate between
the engine and the proxy on keep-alive connections, so drift hits both alike. Every proxied
request names a session, so turn_start and turn_end really reach the daemon.
Run: ``.venv/bin/python -m bench.proxy_overhead [N] [--no-session | --daemon-down |
--bare-daemon]`` (no session id; daemon unreachable; a constant-answer stand-in daemon).
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp

from bench.procs import ROOT, bare_server, daemon, free_port

SID = (lambda i: "") if "--no-session" in sys.argv else (lambda i: f"s{i % 32}")  # noqa: E731
BODY = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "You are a careful agent. " * 40},
        {"role": "user", "content": "Summarise the repository layout."},
    ],
}


def start(argv: list[str], probe: str) -> subprocess.Popen:
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            urllib.request.urlopen(probe, timeout=1).read()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{argv[0]} did not come up")


async def one(http: aiohttp.ClientSession, url: str, stream: bool, sid: str) -> tuple[float, float]:
    """(time to first body byte, time to the end) of one request, in seconds."""
    t0 = time.perf_counter()
    first = 0.0
    async with http.post(
        f"{url}/v1/chat/completions",
        json={**BODY, "stream": stream},
        headers={"X-Session-Id": sid} if sid else {},
    ) as r:
        async for _ in r.content.iter_any():
            if not first:
                first = time.perf_counter() - t0
        assert r.status == 200
    return first, time.perf_counter() - t0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def measure(engine: str, proxy: str, n: int) -> dict:
    out: dict = {}
    async with aiohttp.ClientSession() as http:
        for stream in (False, True):
            direct: list[tuple[float, float]] = []
            via: list[tuple[float, float]] = []
            for i in range(n + 50):
                d = await one(http, engine, stream, SID(i))
                p = await one(http, proxy, stream, SID(i))
                if i >= 50:  # warm-up
                    direct.append(d)
                    via.append(p)
            label = "streaming" if stream else "non-streaming"
            for k, name in ((0, "first byte"), (1, "complete")):
                dd = [x[k] * 1e3 for x in direct]
                pp = [x[k] * 1e3 for x in via]
                diff = [b - a for a, b in zip(dd, pp, strict=True)]
                out[f"{label}.{name.replace(' ', '_')}"] = {
                    "direct_p50_ms": statistics.median(dd),
                    "proxy_p50_ms": statistics.median(pp),
                    "added_p50_ms": statistics.median(diff),
                }
                print(
                    f"{label:14} {name:10} direct p50 {statistics.median(dd):6.2f} ms  "
                    f"proxy p50 {statistics.median(pp):6.2f} ms  added p50 "
                    f"{statistics.median(diff):5.2f} ms  p99 "
                    f"{pct(pp, 0.99) - pct(dd, 0.99):5.2f} ms"
                )
    return out


def main() -> None:
    collect(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 500, sys.argv)


def collect(n: int = 300, argv: list[str] | None = None) -> dict:
    """Added latency of the proxy against the stand-in engine, with a real daemon behind."""
    argv = argv or []
    engine_port, proxy_port, dead = free_port(), free_port(), free_port()
    engine_py = str(Path(ROOT) / "tests" / "support" / "openai_engine.py")
    with daemon() as (daemon_port, _), bare_server() as bare_port:
        target = daemon_port
        if "--daemon-down" in argv:
            target = dead
        elif "--bare-daemon" in argv:  # a constant-answer stand-in: the proxy's own cost
            target = bare_port
        engine = start(
            [sys.executable, engine_py, "--listen", f"127.0.0.1:{engine_port}"],
            f"http://127.0.0.1:{engine_port}/v1/models",
        )
        proxy = start(
            [
                sys.executable,
                "-m",
                "ramakv_proxy",
                "--upstream",
                f"http://127.0.0.1:{engine_port}",
                "--listen",
                f"127.0.0.1:{proxy_port}",
                "--daemon",
                f"http://127.0.0.1:{target}",
                "--log-level",
                "WARNING",
            ],
            f"http://127.0.0.1:{proxy_port}/_ramakv/stats",
        )
        try:
            print(f"ramakv-proxy overhead, {n} requests each way, sequential, keep-alive")
            result = asyncio.run(
                measure(f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{proxy_port}", n)
            )
            stats = (
                urllib.request.urlopen(f"http://127.0.0.1:{proxy_port}/_ramakv/stats", timeout=5)
                .read()
                .decode()
            )
            print(f"proxy event counters: {stats}")
            return result
        finally:
            for p in (proxy, engine):
                p.terminate()
                p.wait(10)


if __name__ == "__main__":
    main()
