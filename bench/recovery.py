"""Start-up: time to first answered event and RSS for stored sessions x 512 hashes."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.dataset import session_maps, write_store
from bench.procs import daemon


def rss_mib(pid: int) -> float:
    """Resident set size of a process, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(n_sessions: int, chunks: int = 512) -> dict:
    """Write the store, start the daemon, time until it answers health."""
    with tempfile.TemporaryDirectory(prefix="ramakv-recovery-") as tmp:
        db = Path(tmp) / "sessions.db"
        maps = session_maps(n_sessions, chunks)
        write_store(db, maps)
        refs = sum(len(set(m)) for m in maps)
        distinct = len({h for m in maps for h in m})
        del maps
        t0 = time.perf_counter()
        with daemon(store=str(db)) as (_, proc):
            ready = time.perf_counter() - t0
            rss = rss_mib(proc.pid)
        return {
            "sessions": n_sessions,
            "hashes_per_session": chunks,
            "references": refs,
            "distinct_chunks": distinct,
            "ready_s": ready,
            "rss_mib": rss,
            "db_mib": 0.0,
        }


def baseline_ready_s() -> float:
    """Time to first answer with an empty store (process start-up cost alone)."""
    t0 = time.perf_counter()
    with daemon():
        return time.perf_counter() - t0


def run(sizes: tuple[int, ...] = (1000, 10000, 50000)) -> dict:
    """Measure each size; report growth per 1k sessions to show linearity."""
    empty = baseline_ready_s()
    rows = [measure(n) for n in sizes]
    for r in rows:
        r["restore_s"] = r["ready_s"] - empty
        r["restore_s_per_1k_sessions"] = r["restore_s"] / (r["sessions"] / 1000)
    return {"empty_ready_s": empty, "sizes": rows}


def table(res: dict) -> str:
    """Markdown table."""
    lines = [
        f"empty store: ready in {res['empty_ready_s']:.2f} s",
        "",
        "| sessions x 512 | references | distinct | ready s | restore s | s per 1k | RSS MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in res["sizes"]:
        lines.append(
            f"| {r['sessions']} | {r['references']} | {r['distinct_chunks']} | "
            f"{r['ready_s']:.2f} | {r['restore_s']:.2f} | "
            f"{r['restore_s_per_1k_sessions']:.3f} | {r['rss_mib']:.0f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(run((1000, 10000))))
