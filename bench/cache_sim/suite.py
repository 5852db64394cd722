"""The cache-effectiveness suite: the grid of replays, the summary dict and the text table."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from typing import Any

from bench.cache_sim.cost_model import CostModel
from bench.cache_sim.policy import (
    ASCEND_EXT,
    CAPPED,
    LRU,
    SKIP_TOUCH,
    STEERED,
    VARIANTS,
    Policy,
)
from bench.cache_sim.runner import RunResult, replay
from bench.cache_sim.workload import Trace, WorkloadParams, generate

CAPACITIES = (0.10, 0.25, 0.50)
LEADS = (0.0, 0.2, 1.0)
SEED = 1
COMMAND = "python -m bench.cache_sim"
# Sensitivity at C = 25 %, L = 1 s: a slower SSD (LMCache's local-disk path below the
# drive's rating) and longer agent contexts (compaction at 64k tokens instead of 24k).
# 1 GB/s drives the SSD queue into saturation under LRU alone.
SENSITIVITY: dict[str, dict[str, Any]] = {
    "ssd_2GBps": {
        "cost": {"ssd_bytes_per_s": 2e9},
        "policies": (LRU, ASCEND_EXT, SKIP_TOUCH, STEERED, CAPPED),
    },
    "ssd_1GBps": {"cost": {"ssd_bytes_per_s": 1e9}, "policies": (LRU, ASCEND_EXT, STEERED, CAPPED)},
    "compact_64k": {"workload": {"compact_tokens": 65536}, "policies": (LRU, STEERED)},
}


@functools.lru_cache(maxsize=4)
def _trace(params: WorkloadParams, seed: int, cost: CostModel) -> Trace:
    return generate(params, seed, cost)


def _one(job: tuple[WorkloadParams, CostModel, Policy, float, float, str]) -> dict[str, Any]:
    """One replay (runs in a worker process); returns the result as a dict plus its tag."""
    params, cost, policy, capacity, lead, tag = job
    logging.getLogger("ramakv").setLevel(logging.WARNING)
    trace = _trace(params, SEED, cost)
    res: RunResult = asyncio.run(replay(trace, policy, capacity, lead, cost))
    d = res.to_dict()
    d.update(
        tag=tag,
        peak_working_set=trace.peak_working_set,
        requests=trace.requests,
        distinct_chunks=trace.distinct_chunks,
    )
    return d


def _jobs(quick: bool, params: WorkloadParams, cost: CostModel) -> list[tuple]:
    jobs: list[tuple] = []
    caps = CAPACITIES
    for c in caps:
        jobs.append((params, cost, LRU, c, 1.0, "grid"))
        for lead in LEADS if not quick or c == 0.25 else (1.0,):
            jobs.append((params, cost, STEERED, c, lead, "grid"))
    variants = [v for v in VARIANTS if v != STEERED]
    if quick:
        variants = [v for v in variants if v.name in ("daemon + ascend_ext", "evict/demote only")]
    for v in variants:
        jobs.append((params, cost, v, 0.25, 1.0, "variant"))
    if not quick:
        for name, change in SENSITIVITY.items():
            p2 = replace(params, **change.get("workload", {}))
            c2 = replace(cost, **change.get("cost", {}))
            for pol in change["policies"]:
                jobs.append((p2, c2, pol, 0.25, 1.0, f"sens:{name}"))
    return jobs


def _pair(lru: dict[str, Any], steered: dict[str, Any]) -> dict[str, Any]:
    gain = lru["slow_path"] / steered["slow_path"] if steered["slow_path"] else float("inf")
    red = 1.0 - steered["ttft_mean_ms"] / lru["ttft_mean_ms"] if lru["ttft_mean_ms"] else 0.0
    return {
        "slow_path_gain": round(gain, 3),
        "ttft_reduction": round(red, 4),
        "hit_rate_lru": lru["hit_rate"],
        "hit_rate_steered": steered["hit_rate"],
        "ttft_mean_ms_lru": round(lru["ttft_mean_ms"], 2),
        "ttft_mean_ms_steered": round(steered["ttft_mean_ms"], 2),
        "ttft_reduction_bound": round(1.0 - lru["ttft_oracle_ms"] / lru["ttft_mean_ms"], 4)
        if lru["ttft_mean_ms"]
        else 0.0,
        "slow_path_lru": lru["slow_path"],
        "slow_path_steered": steered["slow_path"],
    }


def run(
    quick: bool = False,
    out_dir: str | None = "bench/results",
    plots: bool = True,
    workers: int | None = None,
) -> dict[str, Any]:
    """Run the grid; returns the summary (``result["capacity_25"]["slow_path_gain"]`` ...).

    Full: 128 sessions over 20 simulated minutes; quick: 5 minutes and fewer variants.
    Writes ``cache_*.png`` into ``out_dir`` when ``plots`` and matplotlib is installed.
    """
    started = time.perf_counter()
    params = WorkloadParams(duration_s=300.0 if quick else 1200.0)
    cost = CostModel()
    jobs = _jobs(quick, params, cost)
    workers = workers or min(2, os.cpu_count() or 1)
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            runs = list(pool.map(_one, jobs))
    else:
        runs = [_one(j) for j in jobs]
    grid = [r for r in runs if r["tag"] == "grid"]
    lru = {r["capacity"]: r for r in grid if r["policy"] == LRU.name}
    result: dict[str, Any] = {
        "quick": quick,
        "command": COMMAND + (" --quick" if quick else ""),
        "steered_policy": STEERED.name,
        "lead_for_keys_s": 1.0,
        "workload": asdict(params),
        "cost": {**asdict(cost), **cost.describe()},
        "peak_working_set_chunks": runs[0]["peak_working_set"],
        "requests": runs[0]["requests"],
        "distinct_chunks": runs[0]["distinct_chunks"],
    }
    for c in CAPACITIES:
        key = f"capacity_{round(c * 100)}"
        by_lead = {}
        for r in grid:
            if r["capacity"] == c and r["policy"] == STEERED.name:
                by_lead[str(r["lead_s"])] = _pair(lru[c], r)
        result[key] = {**by_lead.get("1.0", {}), "by_lead": by_lead}
    base = next(r for r in grid if r["capacity"] == 0.25 and r["policy"] == LRU.name)
    result["variants"] = {
        r["policy"]: _pair(base, r)
        for r in runs
        if r["tag"] == "variant"
        or (
            r["tag"] == "grid"
            and r["policy"] == STEERED.name
            and r["capacity"] == 0.25
            and r["lead_s"] == 1.0
        )
    }
    sens: dict[str, Any] = {}
    for name in SENSITIVITY:
        pair = {r["policy"]: r for r in runs if r["tag"] == f"sens:{name}"}
        if LRU.name in pair:
            sens[name] = {
                pol: _pair(pair[LRU.name], r) for pol, r in pair.items() if pol != LRU.name
            }
    result["sensitivity"] = sens
    result["runs"] = runs
    result["wall_s"] = round(time.perf_counter() - started, 1)
    if plots and out_dir:
        from bench.cache_sim.plots import write_plots

        result["plots"] = write_plots(result, out_dir)
    return result


def _row(r: dict[str, Any], base: dict[str, Any] | None) -> str:
    turns = max(1, r["turns"])
    gain = red = ""
    if base is not None and r is not base:
        p = _pair(base, r)
        gain, red = f"{p['slow_path_gain']:.2f}x", f"{p['ttft_reduction'] * 100:+.1f}%"
    return (
        f"{r['capacity'] * 100:>4.0f}% {r['lead_s']:>5.1f} {r['policy']:<34} "
        f"{r['hit_rate'] * 100:>6.1f}% {r['ddr'] / turns:>6.1f} {r['ssd'] / turns:>6.1f} "
        f"{r['recompute'] / turns:>6.2f} {r['ttft_mean_ms']:>8.1f} {r['ttft_p99_ms']:>8.1f} "
        f"{r['ssd_util'] * 100:>5.1f}% {gain:>8} {red:>8}"
    )


def table(result: dict[str, Any]) -> str:
    """The results as a fixed-width text table (per-turn chunk counts, TTFT in ms)."""
    head = (
        f"{'C':>5} {'L(s)':>5} {'policy':<34} {'hit':>7} {'DDR/t':>6} {'SSD/t':>6} "
        f"{'rec/t':>6} {'TTFT':>8} {'p99':>8} {'SSDut':>6} {'gain':>8} {'TTFT Δ':>8}"
    )
    runs = result["runs"]
    grid = [r for r in runs if r["tag"] == "grid"]
    lru = {r["capacity"]: r for r in grid if r["policy"] == LRU.name}
    lines = [
        f"cache effectiveness ({result['command']}): {result['requests']} requests, "
        f"peak working set {result['peak_working_set_chunks']} chunks of "
        f"{result['cost']['chunk_mib']:.1f} MiB; gain = LRU / steered critical-path "
        "SSD loads + recomputes",
        head,
        "-" * len(head),
    ]
    for c in CAPACITIES:
        lines.append(_row(lru[c], None))
        for r in sorted(
            (r for r in grid if r["capacity"] == c and r["policy"] != LRU.name),
            key=lambda r: r["lead_s"],
        ):
            lines.append(_row(r, lru[c]))
    lines += ["", "variants at C = 25%, L = 1 s (each against LRU alone):", head, "-" * len(head)]
    base = lru[0.25]
    lines.append(_row(base, None))
    for r in runs:
        if r["tag"] == "variant" or (
            r["tag"] == "grid"
            and r["policy"] == STEERED.name
            and r["capacity"] == 0.25
            and r["lead_s"] == 1.0
        ):
            lines.append(_row(r, base))
    sens = [r for r in runs if r["tag"].startswith("sens:")]
    if sens:
        lines += ["", "sensitivity at C = 25%, L = 1 s:", head, "-" * len(head)]
        for name in SENSITIVITY:
            pair = [r for r in sens if r["tag"] == f"sens:{name}"]
            lines.append(f"  {name}")
            b = next((r for r in pair if r["policy"] == LRU.name), None)
            for r in pair:
                lines.append(_row(r, b))
    c25 = result["capacity_25"]
    lines += [
        "",
        f"cache.capacity_25.slow_path_gain = {c25['slow_path_gain']}  (target >= 2.5)",
        f"cache.capacity_25.ttft_reduction = {c25['ttft_reduction']}  (target >= 0.40; "
        f"bound with every reused chunk in DDR: {c25['ttft_reduction_bound']})",
        f"wall {result['wall_s']} s",
    ]
    return "\n".join(lines)
