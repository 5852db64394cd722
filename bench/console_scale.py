"""The console and `ramakv trace` against a large store, this code beside main's, one run.

For each case (sessions x chunks @ turn_end/s), a store is written straight into SQLite
(bulk rows, no events), then for each side (``old`` = main's code from ``git archive``,
``new`` = this tree): its daemon on that store, `ramakv trace` (time to its first message
and to the end of the snapshot), and a headless console (bench/console_probe.py): when
every session shows, key latency while turn_end events stream in (1,000/s unless the case
says), how far the header's seq lags behind the daemon's during the stream and how long it
takes to catch up once it stops (the churn case: 20,000 x 256 at 500/s), peak RSS. The
load generator runs as its own niced process with its requests encoded beforehand.

    python -m bench.console_scale [--sessions 50000 --chunks 512 --suspended 0.6]
                                  [--also 4000x22,20000x256@500] [--old-ref main] [--sides old,new]

The --sessions case is a store after an overdue idle sweep (issue 33): its hashes spelled as
the engine spells them (held packed, counted in arrays after the load) and a share of its
sessions suspended (60 % unless --suspended says; a case in --also as ``50000x512/0.6``).

At 50,000 x 512 the store holds 25.6 M references: each daemon takes about 3 GB and 10-40 s
to start (they run one after the other), the store build about 2 GB for a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import queue
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import dataset
from bench.procs import free_port, wait_http
from bench.startup_store import engine_hash

ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).resolve().parent / "console_probe.py"
PROBE_LOG = "/tmp/ramakv-console-probe.log"
TARGETS = {"all_sessions_s": 3.0, "key_max_ms": 150.0, "peak_rss_mb": 300.0, "trace_first_s": 1.0}
# The churn case (issue 27): 20,000 x 256 at 500 turn_end/s; the header's seq within 2 s of
# the daemon's during the stream, and caught up within 3 s once it stops.
CHURN_TARGETS = {"lag_max_s": 2.0, "catch_up_s": 3.0}
CHURN_CASE = "20000x256@500"
LOAD_S = 25.0  # seconds of streaming per console run


def new_hash(engine: bool) -> str:
    """One random hash: as the engine spells it (signed 64-bit hex: held packed), or 16
    hex digits (not canonical: the map stays strings)."""
    return engine_hash(os.urandom(8)) if engine else os.urandom(8).hex()


def fast_maps(n: int, chunks: int, engine: bool = False) -> list[list[str]]:
    """bench/dataset's shape (a 16-chunk system prompt shared by all, every fourth session
    sharing half of an earlier one), with hashes from os.urandom: 25 M in seconds;
    ``engine``: spelled as the engine does (new_hash)."""
    system = [new_hash(engine) for _ in range(16)]
    own = chunks - len(system)
    maps: list[list[str]] = []
    for i in range(n):
        if engine:
            blob = os.urandom(8 * own)
            body = [engine_hash(blob[j : j + 8]) for j in range(0, len(blob), 8)]
        else:
            text = os.urandom(8 * own).hex()
            body = [text[j : j + 16] for j in range(0, len(text), 16)]
        if i % 4 == 3 and maps:
            parent = maps[(i * 7919) % len(maps)]
            body[: own // 2] = parent[len(system) : len(system) + own // 2]
        maps.append(system + body)
    return maps


def write_store(path: Path, maps: list[list[str]], root: Path, suspended: float = 0.0) -> None:
    """The daemon's schema (from ``root``'s code), every map a session; ``suspended``: the
    share marked suspended (every session i with i % 10 < share x 10), as the idle sweep
    leaves an overdue store (issue 33)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from ramakv_daemon.adapters.sqlite.store import SCHEMA; print(SCHEMA)"
    )
    schema = subprocess.run(
        [sys.executable, "-c", code, str(root)], check=True, capture_output=True, text=True
    ).stdout
    dataset.write_store(path, maps, schema)
    if not suspended:
        return
    con = sqlite3.connect(path)
    try:
        con.executemany(
            "INSERT OR REPLACE INTO session_state (session_id, suspended, last_event_ts) "
            "VALUES (?, 1, ?)",
            ((f"sess-{i}", time.time() - 60) for i in range(len(maps)) if i % 10 < suspended * 10),
        )
        con.commit()
    finally:
        con.close()


def old_tree(ref: str, into: Path) -> Path:
    """``ref``'s files (read-only `git archive`; the main checkout is never touched)."""
    tar = into / "old.tar"
    subprocess.run(["git", "archive", "--format=tar", "-o", str(tar), ref], cwd=ROOT, check=True)
    with tarfile.open(tar) as t:
        t.extractall(into / "old", filter="data")
    return into / "old"


def env_for(root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(root),
        "PYTHONUNBUFFERED": "1",
        "XDG_CONFIG_HOME": str(root / ".no-config"),
    }


@contextlib.contextmanager
def daemon(root: Path, store: Path, tmp: Path) -> Iterator[tuple[int, float]]:
    """``root``'s daemon on ``store``; yields (port, start-up seconds)."""
    port = free_port()
    cfg = tmp / f"config-{port}.toml"
    cfg.write_text(
        f'listen_addr = "127.0.0.1:{port}"\nnoop_backend = true\nsession_store_path = "{store}"\n'
    )
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ramakv_daemon", "--config", str(cfg), "--log-level", "WARNING"],
        cwd=root,
        env=env_for(root),
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / f"daemon-{port}.log", "w"),
    )
    try:
        wait_http(port, timeout=900)
        yield port, time.perf_counter() - t0
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def trace_cli(root: Path, url: str, timeout: float) -> dict[str, Any]:
    """`ramakv trace`: seconds to its first line and to the snapshot's end (or why not)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ramakv_sdk.cli", "--url", url, "trace"],
        cwd=root,
        env=env_for(root),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out: dict[str, Any] = {"trace_first_s": None, "trace_snapshot_s": None, "first_line": ""}
    assert proc.stdout is not None
    lines: queue.Queue[tuple[float, str]] = queue.Queue()

    def read() -> None:
        for ln in proc.stdout:  # type: ignore[union-attr]
            lines.put((time.perf_counter(), ln.rstrip("\n")))

    threading.Thread(target=read, daemon=True).start()
    while True:
        left = timeout - (time.perf_counter() - t0)
        try:
            at, ln = lines.get(timeout=max(left, 0.01))
        except queue.Empty:
            break
        if out["trace_first_s"] is None:
            out["trace_first_s"] = round(at - t0, 3)
            out["first_line"] = ln[:160]
        old_style = "snapshot:" in ln and "references" not in ln
        if "(last)" in ln or old_style:  # protocol 2's last part, or protocol 1's one
            out["trace_snapshot_s"] = round(at - t0, 3)
            break
        if ln.startswith("--") or "ramakv:" in ln:
            out["first_line"] = ln[:160]
            break
    proc.kill()
    proc.wait()
    return out


def turn_end_bodies(maps: list[list[str]], count: int, engine: bool = False) -> list[bytes]:
    """``count`` turn_end bodies over the first ``count // 2`` sessions, twice: each map with
    its last chunk replaced, first by one new hash, then by another. Sent in turn, every
    turn_end changes its session's map (one chunk out, one in): churn, not repeats."""
    half = max(1, count // 2)
    out = []
    for i in range(count):
        sid = i % min(half, len(maps))
        m = maps[sid]
        new = [*m[:-1], new_hash(engine)]
        out.append(
            json.dumps(
                {
                    "type": "turn_end",
                    "session_id": f"sess-{sid}",
                    "kv_transfer_params": {"chunk_hashes": new},
                }
            ).encode()
        )
    return out


async def daemon_place(port: int) -> tuple[int, str]:
    """The daemon's trace (seq, epoch) now: the header of a snapshot filtered to a session
    that does not exist (a few hundred bytes, whatever the store holds)."""
    import aiohttp

    url = f"http://127.0.0.1:{port}/trace?protocol=2&session=__bench_seq__"
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        header = json.loads((await ws.receive(timeout=60)).data)
        return int(header["seq"]), str(header["epoch"])


class BareFollower(threading.Thread):
    """A bare websocket trace follower in this (otherwise idle) process, beside the
    console: how late each event record reaches a client that does nothing else (``ts``
    to arrival). The daemon's and the wire's part of the console's lag."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.lags: list[float] = []
        self.stop_at: float | None = None

    def run(self) -> None:
        asyncio.run(self._follow())

    async def _follow(self) -> None:
        import aiohttp

        # Resumed from the daemon's place, not from a snapshot: sending 20,000 summaries
        # to a new follower keeps the daemon busy for seconds (and this follower behind).
        seq, epoch = await daemon_place(self.port)
        url = f"http://127.0.0.1:{self.port}/trace?protocol=2&since={seq}&epoch={epoch}"
        async with (
            aiohttp.ClientSession() as http,
            http.ws_connect(url, max_msg_size=64 << 20) as ws,
        ):
            while self.stop_at is None or time.time() < self.stop_at:
                try:
                    msg = await ws.receive(timeout=1.0)
                except TimeoutError:
                    continue
                if msg.type != aiohttp.WSMsgType.TEXT:
                    return
                now = time.time()
                rec = json.loads(msg.data)
                if rec.get("kind") == "event" and rec.get("ts"):
                    self.lags.append(now - float(rec["ts"]))


def load_process(port: int, bodies: Path, rate: float, seconds: float) -> subprocess.Popen:
    """bench/loadgen.py as its own process, niced: requests encoded before the clock starts,
    so it takes little of the two cores the daemon and the console share."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.loadgen",
            "127.0.0.1",
            str(port),
            "--bodies",
            str(bodies),
            "--rate",
            str(rate),
            "--seconds",
            str(seconds),
            "--concurrency",
            "8",
            "--nice",
            "10",
        ],
        cwd=ROOT,
        env=env_for(ROOT),
        stdout=subprocess.PIPE,
        text=True,
    )


def console(
    root: Path, url: str, port: int, expect: int, bodies: Path, rate: float, timeout: float
) -> dict[str, Any]:
    """The probe; once it is ready, ``rate`` turn_end/s stream in for LOAD_S while it
    presses keys and samples the header's lag; then it times the catch-up."""
    t0 = time.time()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(PROBE),
            "--url",
            url,
            "--expect",
            str(expect),
            "--t0",
            str(t0),
            "--timeout",
            str(timeout),
            "--rounds",
            "5",
            *(
                ["--profile", os.environ["CONSOLE_PROFILE"]]
                if os.environ.get("CONSOLE_PROFILE") and root == ROOT
                else []
            ),
        ],
        cwd=root,
        env=env_for(root),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=open(PROBE_LOG, "w"),
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "READY":
        proc.kill()
        return {"error": f"probe failed: {line.strip()[:200]}"}
    bare = BareFollower(port)
    bare.start()
    gen = load_process(port, bodies, rate, LOAD_S)
    time.sleep(1.0)  # the stream is flowing
    proc.stdin.write("go\n")
    proc.stdin.flush()
    out, _ = gen.communicate(timeout=LOAD_S + 120)
    load = json.loads(out)
    final = asyncio.run(daemon_place(port))[0]
    proc.stdin.write(f"stop {load['ended_at']} {final}\n")
    proc.stdin.flush()
    bare.stop_at = time.time() + 1.0
    bare.join(30)
    last = proc.stdout.readline()
    if not last:
        tail = Path(PROBE_LOG).read_text()[-600:]
        return {"error": f"probe died: {tail}"}
    result = json.loads(last)
    proc.wait(60)
    result["load_rps"] = round(load["rps"], 1)
    result["load_p99_ms"] = round(load["p99_ms"], 2)
    result["load_cpu_pct"] = round(100 * load["cpu_s"] / load["seconds"], 1)
    if bare.lags:
        result["bare_lag_max_s"] = round(max(bare.lags), 3)
    return result


# sessions, chunks per session, turn_end/s while measured[, share of the sessions stored
# suspended: the store after an overdue idle sweep, its hashes spelled as the engine does]
Case = tuple[int, int, float] | tuple[int, int, float, float]


def parse_case(text: str, rate: float) -> Case:
    """``SESSIONSxCHUNKS[@RATE][/SUSPENDED]``: ``rate`` when it names none; SUSPENDED a
    share, e.g. ``50000x512/0.6``."""
    text, _, share = text.partition("/")
    scale, _, at = text.partition("@")
    sessions, chunks = (int(x) for x in scale.split("x"))
    if share:
        return sessions, chunks, float(at) if at else rate, float(share)
    return sessions, chunks, float(at) if at else rate


def case_key(case: Case) -> str:
    """A case's name in the results."""
    sessions, chunks, rate, *more = case
    key = f"{sessions}x{chunks}@{rate:g}"
    return f"{key}/{more[0]:g} suspended" if more and more[0] else key


def run(
    cases: list[Case],
    old_ref: str = "main",
    timeout: float = 30.0,
    only: tuple[str, ...] = ("old", "new"),
) -> dict[str, Any]:
    """Every case, old and new side by side."""
    results: dict[str, Any] = {
        "targets": TARGETS,
        "churn_targets": CHURN_TARGETS,
        "churn_case": CHURN_CASE,
        "old_ref": old_ref,
        "load_s": LOAD_S,
    }
    with tempfile.TemporaryDirectory(prefix="ramakv-console-bench-") as tmp_s:
        tmp = Path(tmp_s)
        sides = {"old": old_tree(old_ref, tmp), "new": ROOT}
        sides = {k: v for k, v in sides.items() if k in only}
        for case in cases:
            sessions, chunks, rate, *more = case
            share = more[0] if more else 0.0
            t0 = time.perf_counter()
            maps = fast_maps(sessions, chunks, engine=bool(share))
            store = tmp / f"store-{sessions}x{chunks}.db"
            write_store(store, maps, ROOT, share)
            bodies = tmp / f"bodies-{sessions}x{chunks}.jsonl"
            bodies.write_bytes(b"\n".join(turn_end_bodies(maps, 4000, bool(share))) + b"\n")
            del maps
            key = case_key(case)
            results[key] = {"store_build_s": round(time.perf_counter() - t0, 1), "rate": rate}
            if share:
                results[key]["suspended"] = share
            for side, root in sides.items():
                with daemon(root, store, tmp) as (port, startup):
                    url = f"http://127.0.0.1:{port}"
                    res: dict[str, Any] = {"daemon_start_s": round(startup, 1)}
                    res.update(trace_cli(root, url, timeout))
                    res.update(console(root, url, port, sessions, bodies, rate, timeout))
                results[key][side] = res
                print(f"  {key} {side}: {json.dumps(res)}", flush=True)
    return results


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "never"
    return f"{v}{unit}"


def table(res: dict[str, Any]) -> str:
    """Markdown: one row per case and side, targets in the header."""
    lines = [
        "Console (headless, Pilot) and `ramakv trace` vs a daemon with a bulk-written "
        f"store; for {res.get('load_s', LOAD_S):.0f} s turn_end/s stream in (each changes its "
        "session's map) while keys are pressed; the load generator is its own niced process. "
        f"old = `{res['old_ref']}`. Targets at 50,000 x 512: every session shown within 3 s, "
        "each key answered within 150 ms, console under 300 MB, trace connects within 1 s. "
        f"Churn targets at {res.get('churn_case', CHURN_CASE)}: the header's seq at most 2 s "
        "behind the daemon's during the stream, caught up within 3 s after it stops. The lag "
        "is the daemon's event time to the header showing it; in brackets the console's own "
        "part of it (the record's arrival at the console to the header) and how late the "
        "records reached a bare websocket follower in the bench's own process (the "
        "daemon's and the wire's part).",
        "",
        "| store @ turn_end/s | code | all sessions shown | key median / max ms (down, sort, "
        "view) | header seq lag median / max s (console's own max; a bare follower's max) | "
        "catch-up after the "
        "stream s | console peak RSS MB (CPU % of a core) | `ramakv trace` first message / "
        "snapshot done | events seen / load rps (load generator CPU %) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, sides in res.items():
        if not isinstance(sides, dict) or "store_build_s" not in sides:
            continue
        for side in ("old", "new"):
            if side not in sides:
                continue
            r = sides[side]
            if "error" in r:
                lines.append(f"| {key} | {side} | {r['error']} | | | | | | |")
                continue
            ks = r.get("key_ms", {})
            keys = (
                f"{r.get('key_median_ms')} / {r.get('key_max_ms')} "
                f"({ks.get('down')}, {ks.get('sort')}, {ks.get('view')})"
            )
            shown = (
                (
                    _fmt(None) + f" in {res.get('timeout', 30)} s ({r.get('rows_seen')} rows; "
                    f"{r.get('banner', '')[:60]})"
                )
                if r.get("all_sessions_s") is None
                else f"{r['all_sessions_s']:.2f} s"
            )
            trace = (
                f"{_fmt(r.get('trace_first_s'), ' s')} / {_fmt(r.get('trace_snapshot_s'), ' s')}"
            )
            if r.get("trace_snapshot_s") is None:
                trace += f" ({r.get('first_line', '')[:70]})"
            lag = (
                f"{_fmt(r.get('lag_median_s'))} / {_fmt(r.get('lag_max_s'))} "
                f"({_fmt(r.get('console_lag_max_s'))}; {_fmt(r.get('bare_lag_max_s'))})"
            )
            lines.append(
                f"| {key} | {side} | {shown} | {keys} | {lag} | {_fmt(r.get('catch_up_s'))} | "
                f"{r.get('peak_rss_mb')} ({r.get('console_cpu_pct')}) | {trace} | "
                f"{r.get('events_seen')} / "
                f"{r.get('load_rps')} ({r.get('load_cpu_pct')}) |"
            )
        old, new = sides.get("old", {}), sides.get("new", {})
        ratios = []
        for name, label in (
            ("all_sessions_s", "all sessions shown"),
            ("key_max_ms", "slowest key"),
            ("lag_max_s", "largest lag"),
            ("catch_up_s", "catch-up"),
            ("peak_rss_mb", "RSS"),
        ):
            a, b = old.get(name), new.get(name)
            if name == "key_max_ms" and old and not old.get("rows_seen"):
                ratios.append(f"{label}: not comparable (old showed no rows)")
            elif b:
                ratios.append(f"{label} {a / b:.1f}x" if a else f"{label}: old never")
        if ratios:
            lines.append(f"| {key} | old ÷ new | {' · '.join(ratios)} | | | | | | |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.console_scale")
    p.add_argument("--sessions", type=int, default=50_000)
    p.add_argument("--chunks", type=int, default=512)
    p.add_argument(
        "--also",
        default=f"4000x22,{CHURN_CASE}",
        help="more cases, SESSIONSxCHUNKS[@RATE], e.g. 4000x22,20000x256@500",
    )
    p.add_argument("--old-ref", default="main")
    p.add_argument("--rate", type=float, default=1000.0, help="turn_end/s where a case names none")
    p.add_argument("--sides", default="old,new")
    p.add_argument(
        "--suspended",
        type=float,
        default=0.6,
        help="share of the --sessions case's sessions stored suspended (0: every one active)",
    )
    args = p.parse_args()
    cases = [parse_case(c, args.rate) for c in args.also.split(",") if c]
    if args.sessions:
        cases.append((args.sessions, args.chunks, args.rate, args.suspended))
    res = run(cases, args.old_ref, only=tuple(args.sides.split(",")))
    print(table(res))


if __name__ == "__main__":
    main()
