"""A slow cache's keeps against everyone else's writes: unrelated sessions' turn_end latency
with keeps answered at once vs 1.5 s late, side by side in one run (issue 24 item 2).

Each side: a real daemon (SQLite, evict_defer_s = 1) steering the stand-in memory API
(tests/support/lmcache_server.py --defer: ascend_ext's deferred deletes, keeps and
deadlines), answering every /memory/keep at once or ``--keep-delay`` seconds late. One
session re-references a chunk whose delete is deferred, over and over (its turn_end waits
for the keep); ``--sessions`` others send paced turn_ends with maps of their own. Reported:
the others' p50/p99 and the re-referencing session's waits; target: the others' p99 with
slow keeps within 2x of the prompt run's.

Usage: python -m bench.slow_keep [--seconds 8] [--sessions 16] [--keep-delay 1.5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import aiohttp

from bench.procs import ROOT, daemon, free_port

PACE_S = 0.05  # each unrelated session sends a turn_end this often (20/s)
R_X, R_Y = "7fff0001", "7fff0002"  # the re-referencing session's chunks (hex, as engines')


def _chunk(sid: str, turn: int) -> str:
    """Session ``s<i>``'s chunk of turn ``turn``, in hex as the memory API wants."""
    return f"{int(sid[1:]):04x}{turn:08x}"


@contextlib.contextmanager
def stand_in(keep_delay: float) -> Iterator[str]:
    """The stand-in memory API in its own process, deferring deletes; yields its URL."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "support.lmcache_server",
            "--port",
            str(port),
            "--defer",
            "--keep-delay",
            str(keep_delay),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "fake lmcache memory API on URL" once it listens
        if "memory API on" not in line:
            raise RuntimeError(f"the stand-in memory API did not start: {line!r}")
        yield line.rsplit(" ", 1)[-1].strip()
    finally:
        proc.terminate()
        proc.wait(10)


async def _turn_end(http: aiohttp.ClientSession, url: str, sid: str, hashes: list[str]) -> float:
    body = {"type": "turn_end", "session_id": sid, "kv_transfer_params": {"chunk_hashes": hashes}}
    t0 = time.perf_counter()
    async with http.post(url + "/event", json=body) as resp:
        answer = await resp.json()
    if not answer.get("ok"):
        raise RuntimeError(f"turn_end {sid} refused: {answer}")
    return time.perf_counter() - t0


async def _unrelated(
    http: aiohttp.ClientSession, url: str, sid: str, until: float, out: list[float]
) -> None:
    """Paced turn_ends; each turn keeps the last chunk and adds one (the previous drops)."""
    turn, next_at = 0, time.perf_counter()
    while time.perf_counter() < until:
        out.append(await _turn_end(http, url, sid, [_chunk(sid, turn), _chunk(sid, turn + 1)]))
        turn += 1
        next_at += PACE_S
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))


async def _re_referencing(
    http: aiohttp.ClientSession, url: str, lmcache: str, until: float, waits: list[float]
) -> None:
    """Holds R_X, drops it, waits until its deferred delete is pending in the cache, and
    takes it again inside the deferral: that turn_end's commit needs a keep."""
    while time.perf_counter() < until:
        await _turn_end(http, url, "R", [R_X])
        await _turn_end(http, url, "R", [R_Y])
        while time.perf_counter() < until:  # not the wait measured: the evict's delivery
            async with http.get(lmcache + "/_fake/state") as resp:
                if R_X in (await resp.json())["pending"]:
                    break
            await asyncio.sleep(0.005)
        else:
            return
        waits.append(await _turn_end(http, url, "R", [R_X]))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000 if ordered else 0.0


async def _side(url: str, lmcache: str, sessions: int, seconds: float) -> dict[str, Any]:
    others: list[float] = []
    waits: list[float] = []
    async with aiohttp.ClientSession() as http:
        for i in range(sessions):  # warm: each session exists before the clock starts
            await _turn_end(http, url, f"s{i}", [_chunk(f"s{i}", 0)])
        until = time.perf_counter() + seconds
        await asyncio.gather(
            _re_referencing(http, url, lmcache, until, waits),
            *(_unrelated(http, url, f"s{i}", until, others) for i in range(sessions)),
        )
    return {
        "turn_ends": len(others),
        "p50_ms": round(_pct(others, 0.50), 2),
        "p99_ms": round(_pct(others, 0.99), 2),
        "max_ms": round(_pct(others, 1.0), 2),
        "rereference_waits": len(waits),
        "rereference_p50_ms": round(_pct(waits, 0.50), 1),
        "rereference_max_ms": round(_pct(waits, 1.0), 1),
    }


def run(seconds: float = 8.0, sessions: int = 16, keep_delay: float = 1.5) -> dict[str, Any]:
    """Both sides, prompt keeps first; the ratio of the others' p99."""
    res: dict[str, Any] = {"sessions": sessions, "keep_delay_s": keep_delay, "seconds": seconds}
    for name, delay in (("prompt", 0.0), ("slow", keep_delay)):
        with stand_in(delay) as lmcache:
            extra = f'lmcache_url = "{lmcache}"\nevict_defer_s = 1.0\n'
            with daemon(noop=False, extra_config=extra) as (port, _):
                url = f"http://127.0.0.1:{port}"
                res[name] = asyncio.run(_side(url, lmcache, sessions, seconds))
    prompt, slow = res["prompt"]["p99_ms"], res["slow"]["p99_ms"]
    res["p99_ratio"] = round(slow / prompt, 2) if prompt else None
    return res


def table(res: dict[str, Any]) -> str:
    """The markdown table of :func:`run`'s result."""
    lines = [
        f"{res['sessions']} unrelated sessions at {1 / PACE_S:.0f} turn_end/s each beside one "
        f"re-referencing a chunk inside its deferral; keeps answered at once vs "
        f"{res['keep_delay_s']:g} s late (stand-in memory API honouring deadlines), "
        f"{res['seconds']:g} s per side",
        "",
        "| keeps | others' turn_ends | p50 ms | p99 ms | max ms | re-referencing waits | "
        "their p50 ms | their max ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in ("prompt", "slow"):
        r = res[name]
        lines.append(
            f"| {name} | {r['turn_ends']} | {r['p50_ms']} | {r['p99_ms']} | {r['max_ms']} | "
            f"{r['rereference_waits']} | {r['rereference_p50_ms']} | {r['rereference_max_ms']} |"
        )
    lines.append("")
    lines.append(f"others' p99, slow / prompt: **{res['p99_ratio']}** (target <= 2)")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.slow_keep")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--sessions", type=int, default=16)
    p.add_argument("--keep-delay", type=float, default=1.5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    res = run(args.seconds, args.sessions, args.keep_delay)
    print(json.dumps(res, indent=1) if args.json else table(res))


if __name__ == "__main__":
    main()
