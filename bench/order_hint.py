"""What an order hint costs per chunk beside an evict, measured the same way in one run
(issue 31 item 2): MemoryOps.order / MemoryOps.evict on a real lmcache 0.5.6 CPU engine
(DDR + disk, chunks stored through the devserver's turn), timed per call over several batch
sizes; the cost per chunk is the slope of a least-squares line through each size's median,
the per-call cost its intercept. Between evict calls the chunks are put back untimed.

Usage: python -m bench.order_hint [--sizes 16,64,256,1024] [--reps 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

START = 1  # first token of the stored prompt

# name -> what it does, as the daemon sends it
OPS = {
    "order_cold": "order cold, every tier (moves 2 copies a chunk)",
    "order_warm": "order warm, every tier",
    "evict_ddr": "evict DDR copy (DEMOTE)",
    "evict_all": "evict every tier (DELETE)",
}


def _fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through (size, µs) points."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    return slope, my - slope * mx


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e6


def run(sizes: tuple[int, ...] = (16, 64, 256, 1024), reps: int = 7) -> dict:
    """Median µs per call for each op and size, and each op's fitted µs per chunk."""
    from ascend_ext.memory_api import forget_engine, ops_for
    from ascend_ext.memory_ops import CPU, DISK
    from ascend_ext_dev.cpu_engine import EngineSpec, build_engine, destroy_engine
    from ascend_ext_dev.dev_turn import run_turn

    biggest = max(sizes)
    with tempfile.TemporaryDirectory(prefix="ramakv-order-") as tmp:
        spec = EngineSpec(
            disk_dir=tmp,
            ddr_mb=biggest * 4 / 1024 * 2 + 8,  # 4 KiB chunks: room for all, no pressure
            disk_mb=biggest * 4 / 1024 * 2 + 8,
            instance_id="bench-" + uuid.uuid4().hex[:8],
        )
        engine = build_engine(spec)
        ops = ops_for(engine)
        disk = engine.storage_manager.storage_backends[DISK]
        chunk = engine.config.chunk_size

        def store(n: int) -> list[str]:
            """Put the prompt's first n chunks in DDR and on disk (computed or reloaded)."""
            out = run_turn(ops, list(range(START, START + n * chunk)))
            hashes = out["kv_transfer_params"]["chunk_hashes"]
            keys = [ops.key_for(h) for h in hashes]
            while any(disk.exists_in_put_tasks(k) for k in keys):  # untimed: writes land
                time.sleep(0.002)
            return hashes

        try:
            hashes = store(biggest)
            samples: dict[str, dict[int, list[float]]] = {op: {} for op in OPS}
            for _ in range(reps + 1):  # rep 0 warms up (imports, allocator) untimed
                for size in sizes:
                    part = hashes[:size]
                    got = samples["order_cold"].setdefault(size, [])
                    got.append(_timed(lambda p=part: ops.order(p, "cold", None)))
                    got = samples["order_warm"].setdefault(size, [])
                    got.append(_timed(lambda p=part: ops.order(p, "warm", None)))
                    got = samples["evict_ddr"].setdefault(size, [])
                    got.append(_timed(lambda p=part: ops.evict(p, [CPU])))
                    store(size)  # reload from disk into DDR
                    got = samples["evict_all"].setdefault(size, [])
                    got.append(_timed(lambda p=part: ops.evict(p, None)))
                    store(size)  # recompute and store again
            for by_size in samples.values():
                for size in by_size:
                    by_size[size] = by_size[size][1:]  # drop the warm-up
        finally:
            forget_engine(engine)
            destroy_engine(spec)

    res: dict = {"sizes": list(sizes), "reps": reps, "ops": {}}
    for op, by_size in samples.items():
        medians = {size: statistics.median(v) for size, v in by_size.items()}
        slope, intercept = _fit(list(medians.items()))
        res["ops"][op] = {
            "median_us": {str(s): round(m, 1) for s, m in medians.items()},
            "us_per_chunk": round(slope, 3),
            "us_per_call": round(intercept, 1),
        }
    cold = res["ops"]["order_cold"]["us_per_chunk"]
    for op in ("evict_ddr", "evict_all"):
        per = res["ops"][op]["us_per_chunk"]
        res["ops"][op]["x_order_cold"] = round(per / cold, 2) if cold > 0 else None
    return res


def table(res: dict) -> str:
    """Markdown: one row per op, the fitted costs and each size's median."""
    sizes = res["sizes"]
    head = "| op | µs per chunk (slope) | µs per call (intercept) | vs order cold | "
    head += " | ".join(f"{s} chunks µs" for s in sizes) + " |"
    lines = [head, "|---" * (4 + len(sizes)) + "|"]
    for op, r in res["ops"].items():
        ratio = r.get("x_order_cold")
        cells = " | ".join(f"{r['median_us'][str(s)]:.0f}" for s in sizes)
        lines.append(
            f"| {OPS[op]} | {r['us_per_chunk']:.2f} | {r['us_per_call']:.0f} | "
            f"{'' if ratio is None else f'{ratio:.2f}x'} | {cells} |"
        )
    lines.append(
        f"\nMemoryOps calls on one real lmcache 0.5.6 CPU engine (4 KiB chunks, DDR and disk "
        f"with room to spare), medians of {res['reps']} calls per size; a call includes the "
        "hop to the memory worker thread and its wait for in-flight disk writes."
    )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="16,64,256,1024", help="comma-separated batch sizes")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--json", action="store_true", help="print the raw result as JSON too")
    args = p.parse_args()
    res = run(tuple(int(s) for s in args.sizes.split(",")), args.reps)
    print(table(res))
    if args.json:
        print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
