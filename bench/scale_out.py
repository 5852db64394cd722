"""PostgreSQL vs SQLite store: turn_end throughput and p99 side by side in one run, and
handover latency between two daemons on one database, and the cost of the periodic
ownership check by the number of sessions a node holds (docs/scale-out.md).

Run: ``python -m bench.scale_out [--seconds S] [--handovers N]``. Starts its own throw-away
PostgreSQL cluster (tests/support/postgres.py) on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import aiohttp

from bench.loadgen import run_load
from bench.procs import daemon
from bench.throughput import turn_end_body

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.postgres import PostgresServer, find_bindir  # noqa: E402


def _server() -> PostgresServer | None:
    bindir = find_bindir()
    if bindir is None:
        return None
    server = PostgresServer(bindir)
    server.init()
    server.start()
    return server


def _pg_config(url: str, node: str) -> str:
    return f'session_store_url = "{url}"\nnode_id = "{node}"\n'


def throughput(server: PostgresServer, seconds: float, rounds: int) -> dict:
    """Max-rate turn_end on both stores, rounds interleaved; best rate, its p50/p99."""
    runs: dict[str, list[dict]] = {"sqlite": [], "postgresql": []}
    url = server.create_database()
    with (
        daemon() as (sqlite_port, _),
        daemon(extra_config=_pg_config(url, "bench")) as (pg_port, _),
    ):
        for _ in range(rounds):
            for name, port in (("sqlite", sqlite_port), ("postgresql", pg_port)):
                runs[name].append(
                    asyncio.run(
                        run_load("127.0.0.1", port, turn_end_body, concurrency=32, seconds=seconds)
                    )
                )
    best = {k: max(v, key=lambda r: r["rps"]) for k, v in runs.items()}
    best["ratio_rps"] = best["postgresql"]["rps"] / best["sqlite"]["rps"]
    best["ratio_p99"] = best["postgresql"]["p99_ms"] / best["sqlite"]["p99_ms"]
    return best


async def _handovers(a_port: int, b_port: int, n: int) -> list[float]:
    """Seconds from posting turn_start to b until a's trace shows the session released."""
    out: list[float] = []
    async with aiohttp.ClientSession() as http:

        async def post(port: int, body: dict) -> dict:
            async with http.post(f"http://127.0.0.1:{port}/event", json=body) as r:
                return await r.json()

        async with http.ws_connect(f"http://127.0.0.1:{a_port}/trace?protocol=2") as ws:
            await ws.receive_json(timeout=30)  # the header
            while not (await ws.receive_json(timeout=30)).get("last"):
                pass  # the snapshot's parts
            for i in range(n):
                sid = f"handover-{i}"
                hashes = ["sys", f"{sid}-1", f"{sid}-2"]
                answer = await post(
                    a_port,
                    {
                        "type": "turn_end",
                        "session_id": sid,
                        "kv_transfer_params": {"chunk_hashes": hashes},
                    },
                )
                assert answer["ok"], answer
                t0 = time.perf_counter()
                assert (await post(b_port, {"type": "turn_start", "session_id": sid}))["ok"]
                while True:
                    rec = await ws.receive_json(timeout=30)
                    if (
                        rec.get("kind") == "event"
                        and rec.get("type") == "session_close"
                        and rec.get("session_id") == sid
                    ):
                        break
                out.append(time.perf_counter() - t0)
    return out


def handover(server: PostgresServer, n: int) -> dict:
    url = server.create_database()
    with (
        daemon(extra_config=_pg_config(url, "a")) as (a_port, _),
        daemon(extra_config=_pg_config(url, "b")) as (b_port, _),
    ):
        lat = sorted(asyncio.run(_handovers(a_port, b_port, n)))
    return {
        "handovers": n,
        "p50_ms": statistics.median(lat) * 1000,
        "p99_ms": lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1000,
    }


def ownership_check(server: PostgresServer, sizes: tuple[int, ...]) -> list[dict]:
    """The periodic ownership check's query (who owns each held session) for a node holding
    ``n`` sessions: median of 5, and its share of the default period."""
    from ramakv_daemon.adapters.postgres.store import PostgresSessionStore
    from ramakv_daemon.core.session import Session
    from ramakv_daemon.ownership.ownership import DEFAULT_CHECK_S
    from ramakv_daemon.ports import WriteBatch

    async def measure() -> list[dict]:
        store = PostgresSessionStore(server.create_database(), "a")
        await store.open()
        out = []
        try:
            held = 0
            for n in sizes:
                await store.write(
                    WriteBatch(
                        {
                            f"s{i}": Session(f"s{i}", tuple(f"{i:x}{j}" for j in range(8)))
                            for i in range(held, n)
                        }
                    )
                )
                held = n
                ids = [f"s{i}" for i in range(n)]
                times = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    owners = await store.owners(ids)
                    times.append(time.perf_counter() - t0)
                assert len(owners) == n
                ms = statistics.median(times) * 1000
                out.append({"sessions": n, "ms": ms, "period_share": ms / (DEFAULT_CHECK_S * 1000)})
        finally:
            await store.close()
        return out

    return asyncio.run(measure())


def run(seconds: float = 5.0, rounds: int = 2, handovers: int = 200) -> dict:
    server = _server()
    if server is None:
        return {"skipped": "PostgreSQL is not installed (no pg_ctl)"}
    try:
        return {
            "turn_end": throughput(server, seconds, rounds),
            "handover": handover(server, handovers),
            "ownership_check": ownership_check(server, (1_000, 10_000, 50_000)),
        }
    finally:
        server.destroy()


def table(res: dict) -> str:
    if "skipped" in res:
        return f"skipped: {res['skipped']}"
    t, h = res["turn_end"], res["handover"]
    lines = ["| store | turn_end ev/s | p50 ms | p99 ms |", "|---|---|---|---|"]
    for name in ("sqlite", "postgresql"):
        r = t[name]
        lines.append(f"| {name} | {r['rps']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |")
    lines.append(
        f"\nPostgreSQL/SQLite: {t['ratio_rps']:.2f}x the rate, {t['ratio_p99']:.2f}x "
        f"the p99 (max rate, 32 connections, same run)."
    )
    lines.append(
        f"Handover (turn_start on node b -> node a's session_close in its trace), "
        f"{h['handovers']} sessions: p50 {h['p50_ms']:.2f} ms, p99 {h['p99_ms']:.2f} ms."
    )
    for c in res.get("ownership_check", ()):
        lines.append(
            f"Ownership check of {c['sessions']} held sessions: {c['ms']:.1f} ms "
            f"({c['period_share'] * 100:.3f} % of the default 30 s period)."
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.scale_out")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--handovers", type=int, default=200)
    a = p.parse_args()
    res = run(a.seconds, a.rounds, a.handovers)
    print(table(res))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
