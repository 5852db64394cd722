"""What the storage and idempotency guards cost, side by side in one run: CPU per turn_end
through a real service and SQLite file without and with an ``event_id`` (request digest,
answer kept), and the after-commit check that the store's files are still the ones opened
(two stats) against one group commit. `python -m bench.guard_costs [EVENTS]`."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time

import orjson

from bench.throughput import turn_end_body
from ramakv_daemon.adapters.backends.noop import NoopBackend
from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.bootstrap import build
from ramakv_daemon.config import Config
from ramakv_daemon.ports import WriteBatch

CONCURRENCY = 32


async def _cpu_per_event(events: int, with_ids: bool) -> float:
    """Process CPU per turn_end (µs) after a warm-up, for one fresh service."""
    with tempfile.TemporaryDirectory(prefix="ramakv-guard-") as tmp:
        cfg = Config(session_store_path=f"{tmp}/s.db", noop_backend=True)
        svc = build(cfg, SqliteSessionStore(cfg.session_store_path), NoopBackend())
        await svc.start()
        payloads = []
        for k in range(events // CONCURRENCY):
            for w in range(CONCURRENCY):
                p = orjson.loads(turn_end_body(w * 1_000_000 + k))
                if with_ids:
                    p["event_id"] = f"e-{w}-{k}"
                payloads.append(p)
        warm = min(len(payloads) // 4, 100 * CONCURRENCY)

        async def run(part: list[dict]) -> None:
            for i in range(0, len(part), CONCURRENCY):
                await asyncio.gather(*(svc.handle(dict(p)) for p in part[i : i + CONCURRENCY]))

        await run(payloads[:warm])
        t0 = time.process_time()
        await run(payloads[warm:])
        cpu = time.process_time() - t0
        await svc.stop()
    return cpu / (len(payloads) - warm) * 1e6


async def _file_check_vs_commit(rounds: int = 2000) -> tuple[float, float]:
    """µs per files check, µs per one-session commit (the check runs once per commit)."""
    from ramakv_daemon.core.session import Session

    with tempfile.TemporaryDirectory(prefix="ramakv-guard-") as tmp:
        store = SqliteSessionStore(f"{tmp}/s.db")
        await store.open()
        files = store._files
        assert files is not None
        t0 = time.perf_counter()
        for _ in range(rounds):
            files.problem()
        check = (time.perf_counter() - t0) / rounds * 1e6
        t0 = time.perf_counter()
        for i in range(rounds):
            await store.write(WriteBatch({"s": Session("s", (f"h{i}",))}))
        commit = (time.perf_counter() - t0) / rounds * 1e6
        await store.close()
    return check, commit


async def measure(events: int = 16000) -> dict:
    """Interleaved pairs (plain, with ids) so machine noise hits both alike."""
    plain, ids = [], []
    for _ in range(2):
        plain.append(await _cpu_per_event(events, False))
        ids.append(await _cpu_per_event(events, True))
    check, commit = await _file_check_vs_commit()
    return {
        "plain_us": min(plain),
        "event_id_us": min(ids),
        "ratio": min(ids) / min(plain),
        "files_check_us": check,
        "commit_us": commit,
        "check_share": check / commit,
    }


def table(r: dict) -> str:
    """The figures as a markdown table (``make bench``'s section)."""
    return "\n".join(
        [
            "| measured | reference | ratio |",
            "|---|---|---|",
            f"| turn_end CPU with an event_id: {r['event_id_us']:.1f} µs | "
            f"without: {r['plain_us']:.1f} µs | {r['ratio']:.2f} |",
            f"| files check after each commit: {r['files_check_us']:.2f} µs | "
            f"one-session commit: {r['commit_us']:.1f} µs | {r['check_share']:.3f} |",
        ]
    )


if __name__ == "__main__":
    r = asyncio.run(measure(int(next((a for a in sys.argv[1:] if a.isdigit()), 16000))))
    print(
        f"turn_end CPU: {r['plain_us']:.1f} µs plain, {r['event_id_us']:.1f} µs with an "
        f"event_id (ratio {r['ratio']:.2f}; best of 2 interleaved runs each)"
    )
    print(
        f"files check after each commit: {r['files_check_us']:.2f} µs against "
        f"{r['commit_us']:.1f} µs for a one-session commit ({r['check_share']:.1%})"
    )
