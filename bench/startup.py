"""Start-up: exec to listening, RSS, and turn_end latency in the first seconds after, on an
empty store (beside a bare aiohttp server's exec to listening, the floor) and on large
stores of N sessions x 512 hashes (64 shared by all + 448 each, written once under /tmp).

    python -m bench.startup [--sessions 10000,50000] [--seconds 30] [--empty-runs 10]

Processes run with a bytecode cache (PYTHONPYCACHEPREFIX under /tmp), as an installed
daemon does: without one every start compiles every module again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.loadgen import build_request, read_response
from bench.procs import ROOT, free_port
from bench.startup_store import build

STORE_DIR = Path(os.environ.get("RAMAKV_BENCH_STORE_DIR", "/tmp"))
PYCACHE = "/tmp/ramakv-bench-pycache"
WINDOW_S = 2.0  # turn_end latencies are reported per window of this length
REFS_PER_SESSION = 512
DAEMON_MODULE = "ramakv_daemon.http.app"  # what the daemon imports to serve (import_ms)


def child_env() -> dict[str, str]:
    """The environment of every measured process: bytecode cached, output unbuffered."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": PYCACHE, "PYTHONUNBUFFERED": "1"}


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (its peak) of a process, MiB."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) a process has used: less sensitive than
    wall time to the other processes of a loaded machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_daemon(store: Path, tmp: Path) -> tuple[subprocess.Popen, int]:
    """A daemon (noop backend) on ``store``; returns at once (the process, its port)."""
    port = free_port()
    cfg = tmp / "config.toml"
    cfg.write_text(
        f'listen_addr = "127.0.0.1:{port}"\nnoop_backend = true\nsession_store_path = "{store}"\n'
    )
    cmd = [sys.executable, "-m", "ramakv_daemon", "--config", str(cfg), "--log-level", "WARNING"]
    return _spawn(cmd), port


def start_bare() -> tuple[subprocess.Popen, int]:
    """The bare aiohttp server (bench/bare_server.py): the floor of any aiohttp daemon."""
    port = free_port()
    return _spawn([sys.executable, "-m", "bench.bare_server", str(port)]), port


def _spawn(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=child_env()
    )


def wait_listening(proc: subprocess.Popen, port: int, t0: float, timeout: float = 600.0) -> float:
    """Seconds from ``t0`` (just before exec) until ``port`` accepts (polled every 2 ms)."""
    while time.perf_counter() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return time.perf_counter() - t0
        time.sleep(0.002)
    raise RuntimeError("process did not listen")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _listen_time(kind: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) from exec to listening."""
    with tempfile.TemporaryDirectory(prefix="ramakv-startup-") as d:
        t0 = time.perf_counter()
        proc, port = start_daemon(Path(d) / "s.db", Path(d)) if kind == "daemon" else start_bare()
        try:
            return wait_listening(proc, port, t0, 60), cpu_s(proc.pid)
        finally:
            stop(proc)


def run_python(*args: str) -> subprocess.CompletedProcess[str]:
    """This interpreter run to its end in the measured processes' environment, output kept."""
    cmd = [sys.executable, *args]
    return subprocess.run(
        cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True, check=True
    )


def import_ms(module: str) -> float:
    """``python -X importtime -c 'import module'``: its cumulative figure, ms."""
    err = run_python("-X", "importtime", "-c", f"import {module}").stderr
    for line in reversed(err.splitlines()):
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S+)", line)
        if m and m[2] == module:
            return int(m[1]) / 1000
    return float("nan")


def empty_case(runs: int) -> dict[str, Any]:
    """Exec to listening on a fresh empty store and of the bare server, interleaved
    ``runs`` times each; and the import time of each (the median of ``runs``)."""
    _listen_time("daemon")  # fills the bytecode cache
    _listen_time("bare")
    daemon, bare, cpu_d, cpu_b, imp_d, imp_b = [], [], [], [], [], []
    for _ in range(runs):
        wall, cpu = _listen_time("daemon")
        daemon.append(wall)
        cpu_d.append(cpu)
        wall, cpu = _listen_time("bare")
        bare.append(wall)
        cpu_b.append(cpu)
        # The serving side: __main__ itself imports it only once the config is read.
        imp_d.append(import_ms(DAEMON_MODULE))
        imp_b.append(import_ms("aiohttp.web"))
    return {
        "runs": runs,
        "listening_s": sorted(daemon),
        "median_s": statistics.median(daemon),
        "min_s": min(daemon),
        "cpu_median_s": statistics.median(cpu_d),
        "bare_median_s": statistics.median(bare),
        "bare_min_s": min(bare),
        "bare_cpu_median_s": statistics.median(cpu_b),
        "over_bare": statistics.median(daemon) / statistics.median(bare),
        "import_ms": statistics.median(imp_d),
        "aiohttp_web_import_ms": statistics.median(imp_b),
    }


async def _probe(
    port: int, bodies: list[bytes], rate: float, seconds: float
) -> list[tuple[float, float]]:
    """One keep-alive connection sending up to ``rate`` turn_end/s for ``seconds``:
    (sent at, latency) per event. A late answer delays the next send, never the clock."""
    out: list[tuple[float, float]] = []
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = time.perf_counter()
    try:
        i = 0
        while (now := time.perf_counter()) - t0 < seconds:
            at = t0 + i / rate
            if at > now:
                await asyncio.sleep(at - now)
            sent = time.perf_counter()
            writer.write(build_request("127.0.0.1", port, "/event", bodies[i % len(bodies)]))
            _, body = await read_response(reader)
            if b'"ok":true' not in body.replace(b" ", b""):
                raise RuntimeError(f"event failed: {body[:200]!r}")
            out.append((sent - t0, time.perf_counter() - sent))
            i = max(i + 1, int((time.perf_counter() - t0) * rate))
    finally:
        writer.close()
    return out


def probe_bodies(store: Path, n: int = 200, turns: int = 40) -> list[bytes]:
    """turn_end bodies for ``n`` stored sessions: each its stored map plus one more hash per
    turn, as an agent's growing context (the daemon diffs the map: a few references move)."""
    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT session_id, map_json FROM sessions ORDER BY rowid LIMIT ?", (n,)
        ).fetchall()
    finally:
        con.close()
    bodies = []
    for t in range(turns):
        for sid, map_json in rows:
            hashes = json.loads(map_json) + [f"probe-{sid}-{k}" for k in range(t + 1)]
            event = {"type": "turn_end", "session_id": sid}
            event["kv_transfer_params"] = {"chunk_hashes": hashes}
            bodies.append(json.dumps(event).encode())
    return bodies


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))] * 1000 if s else float("nan")


def large_case(
    n_sessions: int, seconds: float, rate: float, store_dir: Path = STORE_DIR, codes: bool = True
) -> dict[str, Any]:
    """Exec to listening, RSS at listening and its peak, turn_end latency per window from
    the moment it listens; steady = the last third of the run. ``codes=False``: a store
    written before session_codes (maps as JSON only), which the daemon loads through JSON."""
    name = f"ramakv-startup-{n_sessions}{'' if codes else '-json'}.db"
    store = build(store_dir / name, n_sessions, codes=codes)
    bodies = probe_bodies(store, min(200, n_sessions))
    with tempfile.TemporaryDirectory(prefix="ramakv-startup-", dir=store_dir) as d:
        work = Path(d) / "sessions.db"
        # A copy: the run changes the store; the cached one serves the next run as built.
        subprocess.run(["cp", "--reflink=auto", str(store), str(work)], check=True)
        size = work.stat().st_size
        t0 = time.perf_counter()
        proc, port = start_daemon(work, Path(d))
        try:
            listening = wait_listening(proc, port, t0)
            listening_cpu = cpu_s(proc.pid)
            at_listen = proc_status(proc.pid)
            got = asyncio.run(_probe(port, bodies, rate, seconds))
            end = proc_status(proc.pid)
        finally:
            stop(proc)
    windows = []
    for w in range(int(seconds / WINDOW_S)):
        lat = [x for at, x in got if w * WINDOW_S <= at < (w + 1) * WINDOW_S]
        if lat:
            windows.append(
                {"from_s": w * WINDOW_S, "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99)}
            )
    steady = [x for at, x in got if at >= seconds * 2 / 3]
    steady_p99 = pct(steady, 0.99)
    refs = n_sessions * REFS_PER_SESSION
    worst = max(w["p99_ms"] for w in windows)
    return {
        "sessions": n_sessions,
        "stored_as": "codes" if codes else "json only",
        "references": refs,
        "store_mib": size / 2**20,
        "listening_s": listening,
        "listening_cpu_s": listening_cpu,
        "rss_listening_mib": at_listen["VmRSS"],
        "peak_rss_mib": end["VmHWM"],
        "rss_end_mib": end["VmRSS"],
        "bytes_per_reference": at_listen["VmRSS"] * 2**20 / refs,
        "rate": rate,
        "events": len(got),
        "steady_p50_ms": pct(steady, 0.5),
        "steady_p99_ms": steady_p99,
        "first_window_p50_ms": windows[0]["p50_ms"],
        "worst_window_p99_ms": worst,
        "worst_p99_over_steady": worst / steady_p99,
        "windows": windows,
    }


def where_bytes_go(n_sessions: int, store_dir: Path = STORE_DIR) -> dict[str, float]:
    """The store of ``n_sessions`` loaded in a child process as the daemon loads it: its RSS
    before and after, and how much of that the maps' codes and the count arrays are."""
    store = build(store_dir / f"ramakv-startup-{n_sessions}.db", n_sessions)
    out = run_python("-m", "bench.startup_bytes", str(store)).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def run(
    sizes: tuple[int, ...] = (10_000, 50_000),
    seconds: float = 30.0,
    empty_runs: int = 10,
    rate: float = 100.0,
    json_sizes: tuple[int, ...] = (50_000,),
) -> dict[str, Any]:
    """The empty case, then each size as the daemon stores it, then ``json_sizes`` as a
    store from before session_codes."""
    cases = [large_case(n, seconds, rate) for n in sizes]
    cases += [large_case(n, seconds, rate, codes=False) for n in json_sizes]
    out: dict[str, Any] = {"empty": empty_case(empty_runs), "sizes": cases}
    if sizes:
        out["bytes"] = where_bytes_go(max(sizes))
    return out


def table(res: dict[str, Any]) -> str:
    """Markdown: the empty case in a line, one row per size."""
    e = res["empty"]
    lines = [
        f"Empty store, exec to listening ({e['runs']} runs, bytecode cached): median "
        f"{e['median_s']:.3f} s (min {e['min_s']:.3f}, CPU {e['cpu_median_s']:.3f} s); a bare "
        f"aiohttp server (bench/bare_server.py) {e['bare_median_s']:.3f} s (min "
        f"{e['bare_min_s']:.3f}, CPU {e['bare_cpu_median_s']:.3f} s): {e['over_bare']:.2f}x "
        f"the bare server's wall time. Imports (`-X importtime`, median): the daemon "
        f"(`{DAEMON_MODULE}`) {e['import_ms']:.0f} ms, `aiohttp.web` alone "
        f"{e['aiohttp_web_import_ms']:.0f} ms.",
        "",
        "| sessions x 512 | stored as | store MiB | listening s (CPU s) | RSS at listening MiB "
        "| peak MiB | B/reference | turn_end steady p50 / p99 ms | first 2 s p50 ms "
        "| worst 2 s p99 / steady p99 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    b = res.get("bytes")
    if b:
        lines += [
            "",
            f"Where the bytes go at {b['sessions']} x 512 (loaded in a child process): maps "
            f"{b['maps_mib']:.0f} MiB ({b['maps_b_per_ref']:.1f} B/reference), count arrays "
            f"{b['table_mib']:.0f} MiB ({b['table_b_per_ref']:.1f} B/reference), the rest "
            f"{b['rest_mib']:.0f} MiB; {b['b_per_ref']:.1f} B/reference over the "
            f"{b['baseline_mib']:.0f} MiB of interpreter and imports; load peak "
            f"{b['peak_mib']:.0f} MiB.",
            "",
        ]
    for r in res["sizes"]:
        lines.append(
            f"| {r['sessions']} | {r.get('stored_as', 'json only')} | {r['store_mib']:.0f} | "
            f"{r['listening_s']:.2f} "
            f"({r['listening_cpu_s']:.1f}) | "
            f"{r['rss_listening_mib']:.0f} | {r['peak_rss_mib']:.0f} | "
            f"{r['bytes_per_reference']:.0f} | {r['steady_p50_ms']:.1f} / "
            f"{r['steady_p99_ms']:.1f} | {r['first_window_p50_ms']:.1f} | "
            f"{r['worst_p99_over_steady']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.startup")
    p.add_argument("--sessions", default="10000,50000", help="comma-separated store sizes")
    p.add_argument("--seconds", type=float, default=30.0, help="turn_end probe after listening")
    p.add_argument("--empty-runs", type=int, default=10)
    p.add_argument("--rate", type=float, default=100.0, help="turn_end/s of the probe")
    p.add_argument(
        "--json-sessions", default="50000", help="sizes also run as a store from before codes"
    )
    a = p.parse_args()
    sizes = tuple(int(x) for x in a.sessions.split(",") if x)
    json_sizes = tuple(int(x) for x in a.json_sessions.split(",") if x)
    res = run(sizes, a.seconds, a.empty_runs, a.rate, json_sizes)
    print(json.dumps(res, indent=1))
    print(table(res))


if __name__ == "__main__":
    main()
