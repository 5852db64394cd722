"""CPU per event of Daemon.handle (a ClientEvent through the bus) alone (no HTTP): the
daemon's own work, less noisy than a throughput run. `python -m bench.service_cpu [EVENTS]
[--profile] [--engine-hashes] [--suspend]`.

``--engine-hashes``: the same events with each hash spelled as the engine spells one (a
signed 64-bit integer in hex), so maps are held packed (core.packed); by default hashes are
names such as ``s3-c17``, which keep maps as tuples of strings.

``--suspend``: instead, the CPU of one session_suspend of a 512-hash session (64 chunks
shared by every session, 448 its own), its commit and the delivery of its cold order
included (EVENTS sessions, suspended 32 at a time)."""

from __future__ import annotations

import asyncio
import cProfile
import hashlib
import pstats
import sys
import tempfile
import time

import orjson

from bench.throughput import turn_end_body
from ramakv_daemon.adapters.backends.noop import NoopBackend
from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.bootstrap import build
from ramakv_daemon.config import Config

CONCURRENCY = 32  # events in flight at once, as the throughput benchmark's connections


def engine_spelling(body: bytes) -> bytes:
    """``body`` with each chunk hash replaced by an engine-style one derived from it."""
    event = orjson.loads(body)
    params = event["kv_transfer_params"]
    params["chunk_hashes"] = [
        f"{int.from_bytes(hashlib.blake2b(h.encode(), digest_size=8).digest(), 'little', signed=True):x}"  # noqa: E501
        for h in params["chunk_hashes"]
    ]
    return orjson.dumps(event)


async def measure(events: int = 20000, profile: bool = False, engine: bool = False) -> dict:
    """turn_end bodies of the throughput benchmark through a real service and SQLite file;
    returns process CPU (every thread) per event after a warm-up of 3,200 events."""
    warm = 100 * CONCURRENCY
    with tempfile.TemporaryDirectory(prefix="ramakv-cpu-") as tmp:
        cfg = Config(session_store_path=f"{tmp}/s.db", noop_backend=True)
        svc = build(
            cfg,
            SqliteSessionStore(cfg.session_store_path, cfg.sqlite_synchronous),
            NoopBackend(),
        )
        await svc.start()
        bodies = [
            turn_end_body(w * 1_000_000 + k)
            for k in range(max(events, 2 * warm) // CONCURRENCY)
            for w in range(CONCURRENCY)
        ]
        if engine:
            bodies = [engine_spelling(b) for b in bodies]

        async def burst(part: list[bytes]) -> None:
            await asyncio.gather(*(svc.handle(orjson.loads(b)) for b in part))

        for i in range(0, warm, CONCURRENCY):
            await burst(bodies[i : i + CONCURRENCY])
        prof = cProfile.Profile() if profile else None
        t0 = time.process_time()
        if prof:
            prof.enable()
        for i in range(warm, len(bodies), CONCURRENCY):
            await burst(bodies[i : i + CONCURRENCY])
        if prof:
            prof.disable()
        cpu = time.process_time() - t0
        await svc.stop()
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    n = len(bodies) - warm
    return {"events": n, "cpu_us_per_turn_end": cpu / n * 1e6}


SUSPEND_SHARED, SUSPEND_OWN = 64, 448


async def measure_suspend(sessions: int = 1000, profile: bool = False) -> dict:
    """Process CPU per session_suspend of a 512-hash session, until the outbox is empty."""
    shared = [f"sys-{i}" for i in range(SUSPEND_SHARED)]
    with tempfile.TemporaryDirectory(prefix="ramakv-cpu-") as tmp:
        cfg = Config(session_store_path=f"{tmp}/s.db", noop_backend=True)
        svc = build(
            cfg,
            SqliteSessionStore(cfg.session_store_path, cfg.sqlite_synchronous),
            NoopBackend(),
        )
        await svc.start()
        dispatcher = svc.default.dispatcher
        ids = [f"sus-{i}" for i in range(sessions)]

        async def drained() -> None:
            while dispatcher.backlog:
                await asyncio.sleep(0.001)

        for i in range(0, sessions, CONCURRENCY):
            await asyncio.gather(
                *(
                    svc.handle(
                        {
                            "type": "turn_end",
                            "session_id": sid,
                            "kv_transfer_params": {
                                "chunk_hashes": shared + [f"{sid}-c{k}" for k in range(SUSPEND_OWN)]
                            },
                        }
                    )
                    for sid in ids[i : i + CONCURRENCY]
                )
            )
        await drained()
        prof = cProfile.Profile() if profile else None
        t0, loop0 = time.process_time(), time.thread_time()
        if prof:
            prof.enable()
        for i in range(0, sessions, CONCURRENCY):
            await asyncio.gather(
                *(
                    svc.handle({"type": "session_suspend", "session_id": sid})
                    for sid in ids[i : i + CONCURRENCY]
                )
            )
        await drained()
        if prof:
            prof.disable()
        cpu, loop = time.process_time() - t0, time.thread_time() - loop0
        await svc.stop()
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    # loop: the event loop's thread alone (what client events wait behind).
    return {
        "events": sessions,
        "cpu_us_per_suspend": cpu / sessions * 1e6,
        "loop_us_per_suspend": loop / sessions * 1e6,
    }


if __name__ == "__main__":
    if "--suspend" in sys.argv:
        out = asyncio.run(
            measure_suspend(
                int(next((a for a in sys.argv[1:] if a.isdigit()), 1000)),
                "--profile" in sys.argv,
            )
        )
        print(
            f"{out['events']} session_suspend events (512 hashes): "
            f"{out['cpu_us_per_suspend']:.0f} µs CPU each, "
            f"{out['loop_us_per_suspend']:.0f} µs of it on the event loop's thread"
        )
        sys.exit(0)
    res = asyncio.run(
        measure(
            int(next((a for a in sys.argv[1:] if a.isdigit()), 20000)),
            "--profile" in sys.argv,
            "--engine-hashes" in sys.argv,
        )
    )
    print(
        f"{res['events']} turn_end events: {res['cpu_us_per_turn_end']:.1f} µs CPU each "
        "(process time, all threads, cProfile adds ~2x when on)"
    )
