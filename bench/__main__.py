"""`make bench`: every benchmark, side by side, into bench/results/latest.{json,md}.

Usage: python -m bench [--quick] [--only NAME[,NAME]] — names: throughput, recovery, memory,
sdk, proxy, cache, console, engine, agent, admin_stall, idle_sweep, scale_out, guard_costs,
startup, slow_keep, order_hint, never_worse.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _throughput(quick: bool) -> tuple[dict, str]:
    from bench import throughput

    res = throughput.run(seconds=3.0 if quick else 5.0, rounds=1 if quick else 2)
    text = throughput.table(res)
    if "turn_end" in res:
        import asyncio

        from bench import service_cpu

        cpu = asyncio.run(service_cpu.measure(8000 if quick else 20000))
        res["turn_end"]["service_cpu_us"] = cpu["cpu_us_per_turn_end"]
        text += (
            f"\n\nThe daemon's own work per turn_end (`python -m bench.service_cpu`: "
            f"EventService.handle with SQLite, no HTTP): {cpu['cpu_us_per_turn_end']:.0f} µs "
            f"CPU; one bare request at its max rate takes at most "
            f"{1e6 / res['turn_end']['bare']['rps']:.0f} µs."
        )
    return res, text


def _recovery(quick: bool) -> tuple[dict, str]:
    from bench import recovery

    res = recovery.run((1000, 5000) if quick else (1000, 10000, 50000))
    return res, recovery.table(res)


def _startup(quick: bool) -> tuple[dict, str]:
    from bench import startup

    sizes = (10_000,) if quick else (10_000, 50_000)
    json_sizes = (10_000,) if quick else (50_000,)  # a store from before session_codes
    res = startup.run(
        sizes, seconds=15.0 if quick else 30.0, empty_runs=5 if quick else 10, json_sizes=json_sizes
    )
    return res, startup.table(res)


def _memory(quick: bool) -> tuple[dict, str]:
    from bench import memory

    res = memory.measure(2000 if quick else 10000)
    return res, memory.table(res)


def _sdk(quick: bool) -> tuple[dict, str]:
    from bench import sdk_overhead

    res = sdk_overhead.collect(3 if quick else 10)
    lines = ["| daemon | call | p50 µs | p99 µs |", "|---|---|---|---|"]
    for side in ("up", "down"):
        for call in ("turn_start", "turn_end_64"):
            r = res[side][call]
            lines.append(f"| {side} | {call} | {r['p50_us']:.2f} | {r['p99_us']:.2f} |")
    return res, "\n".join(lines)


def _proxy(quick: bool) -> tuple[dict, str]:
    from bench import proxy_overhead

    res = proxy_overhead.collect(100 if quick else 300)
    lines = [
        "| request | measured at | direct p50 ms | via proxy p50 ms | added p50 ms |",
        "|---|---|---|---|---|",
    ]
    for key, r in res.items():
        mode, point = key.split(".")
        lines.append(
            f"| {mode} | {point} | {r['direct_p50_ms']:.2f} | "
            f"{r['proxy_p50_ms']:.2f} | {r['added_p50_ms']:.2f} |"
        )
    return res, "\n".join(lines)


def _cache(quick: bool) -> tuple[dict, str]:
    from bench.cache_sim import suite

    res = suite.run(quick=quick, out_dir=str(RESULTS))
    res = {k: v for k, v in res.items() if k != "runs"} | {"runs": res["runs"]}
    return res, "```\n" + suite.table(res) + "\n```"


def _admin_stall(quick: bool) -> tuple[dict, str]:
    import asyncio

    from bench import admin_stall

    res = asyncio.run(admin_stall.measure(5000 if quick else 20000))
    return res, admin_stall.table(res)


def _idle_sweep(quick: bool) -> tuple[dict, str]:
    import asyncio

    from bench import idle_sweep

    res = asyncio.run(idle_sweep.measure(10000 if quick else 50000))
    return res, idle_sweep.table(res)


def _console(quick: bool) -> tuple[dict, str]:
    from bench import console_scale

    churn = console_scale.parse_case(console_scale.CHURN_CASE, 500.0)
    top = (10_000, 512, 1000.0) if quick else (50_000, 512, 1000.0)
    res = console_scale.run([(4000, 22, 1000.0), churn, top])
    return res, console_scale.table(res)


def _engine(quick: bool) -> tuple[dict, str]:
    from ascend_ext.tiny_engine import vllm_available

    why = vllm_available()
    if why is not None:
        return {"skipped": why}, f"skipped: {why}"
    from bench import engine_bench

    res = engine_bench.run(quick=quick)
    return res, engine_bench.table(res)


def _agent(quick: bool) -> tuple[dict, str]:
    from ascend_ext.tiny_engine import vllm_available

    why = vllm_available()
    if why is not None:
        return {"skipped": why}, f"skipped: {why}"
    from bench import agent_bench

    res = agent_bench.run(quick=quick)
    return res, agent_bench.table(res)


def _scale_out(quick: bool) -> tuple[dict, str]:
    from bench import scale_out

    res = scale_out.run(
        seconds=3.0 if quick else 5.0, rounds=1 if quick else 2, handovers=100 if quick else 300
    )
    return res, scale_out.table(res)


def _guard_costs(quick: bool) -> tuple[dict, str]:
    import asyncio

    from bench import guard_costs

    res = asyncio.run(guard_costs.measure(8000 if quick else 16000))
    return res, guard_costs.table(res)


def _slow_keep(quick: bool) -> tuple[dict, str]:
    from bench import slow_keep

    res = slow_keep.run(seconds=5.0 if quick else 10.0)
    return res, slow_keep.table(res)


def _order_hint(quick: bool) -> tuple[dict, str]:
    from bench import order_hint

    res = order_hint.run((16, 64, 256) if quick else (16, 64, 256, 1024), 3 if quick else 7)
    return res, order_hint.table(res)


def _never_worse(quick: bool) -> tuple[dict, str]:
    from ascend_ext.tiny_engine import vllm_available

    why = vllm_available()
    if why is not None:
        return {"skipped": why}, f"skipped: {why}"
    from bench import never_worse

    res = never_worse.run(quick=quick)
    return res, never_worse.table(res)


BENCHES: dict[str, Callable[[bool], tuple[dict, str]]] = {
    "throughput": _throughput,
    "recovery": _recovery,
    "startup": _startup,
    "memory": _memory,
    "sdk": _sdk,
    "proxy": _proxy,
    "cache": _cache,
    "console": _console,
    "engine": _engine,
    "agent": _agent,
    "admin_stall": _admin_stall,
    "idle_sweep": _idle_sweep,
    "scale_out": _scale_out,
    "guard_costs": _guard_costs,
    "slow_keep": _slow_keep,
    "order_hint": _order_hint,
    "never_worse": _never_worse,
}


def _md_sections(previous: dict[str, Any]) -> dict[str, str]:
    """The per-benchmark tables of the last latest.md (for results written without them)."""
    md = RESULTS / "latest.md"
    if not previous or not md.exists():
        return {}
    out: dict[str, str] = {}
    for block in md.read_text().split("\n## ")[1:]:
        name, _, text = block.partition("\n\n")
        out[name.strip()] = text.strip()
    return out


def main() -> None:
    """Run the selected benchmarks; print and write a table per benchmark."""
    p = argparse.ArgumentParser(prog="python -m bench")
    p.add_argument("--quick", action="store_true", help="shorter runs (about 3 minutes)")
    p.add_argument("--only", default="", help="comma-separated subset of " + ",".join(BENCHES))
    args = p.parse_args()
    names = [n for n in args.only.split(",") if n] or list(BENCHES)
    previous: dict[str, Any] = {}
    if args.only and (RESULTS / "latest.json").exists():
        # A partial run updates its sections and keeps the others' last figures.
        previous = json.loads((RESULTS / "latest.json").read_text())
    results: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_start": os.getloadavg(),
        },
        "quick": args.quick,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    # A partial run keeps the full run's header (machine, start) and the other sections;
    # each section carries its own start and load average.
    results = {**results, **previous}
    sections = []
    texts: dict[str, str] = dict(previous.get("_texts", {})) or _md_sections(previous)
    for name in names:
        t0 = time.perf_counter()
        print(f"== {name} ...", flush=True)
        started, load = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), os.getloadavg()
        res, text = BENCHES[name](args.quick)
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        res["started"], res["loadavg_start"] = started, load
        results[name] = res
        texts[name] = text
        print(text, flush=True)
    if not previous:
        results["machine"]["loadavg_end"] = os.getloadavg()
    results["_texts"] = texts
    sections = [f"## {name}\n\n{texts[name]}\n" for name in BENCHES if name in texts]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latest.json").write_text(json.dumps(results, indent=1, default=str))
    header = (
        f"# ram-a-kv benchmarks ({results['started']}, {os.cpu_count()} CPUs, "
        f"load {results['machine']['loadavg_start'][0]:.1f} at start)\n\n"
        "Every speed figure is a ratio against a reference measured in the same run.\n\n"
    )
    (RESULTS / "latest.md").write_text(header + "\n".join(sections))
    print(f"wrote {RESULTS / 'latest.json'} and {RESULTS / 'latest.md'}")


if __name__ == "__main__":
    main()
