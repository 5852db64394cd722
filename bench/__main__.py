"""`make bench`: every benchmark, side by side, into bench/results/latest.{json,md}.

Usage: python -m bench [--quick] [--only NAME[,NAME]] [--before CHECKOUT] — names:
throughput, recovery, memory, sdk, proxy, cache, console, engine, agent, admin_stall,
idle_sweep, idle_restart, read_scale, scale_out, guard_costs, startup, slow_keep, order_hint,
never_worse. ``--before``: the throughput section runs that checkout's daemon too.
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

from bench import sections

RESULTS = Path(__file__).resolve().parent / "results"
# --before: another checkout whose daemon the throughput section runs too (set by main()).
BEFORE_ROOT: list[Path | None] = [None]


def _throughput(quick: bool) -> tuple[dict, str]:
    from bench import throughput

    # The durable floor runs too: its ratio is the most the daemon's can reach.
    res = throughput.run(
        seconds=3.0 if quick else 5.0,
        rounds=1 if quick else 2,
        before=BEFORE_ROOT[0],
        floor=True,
    )
    text = throughput.table(res)
    if "turn_end" in res:
        import asyncio

        from bench import service_cpu

        cpu = asyncio.run(service_cpu.measure(8000 if quick else 20000))
        res["turn_end"]["service_cpu_us"] = cpu["cpu_us_per_turn_end"]
        text += (
            f"\n\nThe daemon's own work per turn_end (`python -m bench.service_cpu`: "
            f"Daemon.handle with SQLite, no HTTP): {cpu['cpu_us_per_turn_end']:.0f} µs "
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


def _idle_restart(quick: bool) -> tuple[dict, str]:
    from bench import idle_restart

    res = idle_restart.run((3000,) if quick else (3000, 10000), 128, 5.0 if quick else 10.0)
    return res, idle_restart.table(res)


def _read_scale(quick: bool) -> tuple[dict, str]:
    from bench import read_scale

    res = read_scale.run((5000,) if quick else (5000, 20000), 0.6, 1 if quick else 3)
    return res, read_scale.table(res)


def _console(quick: bool) -> tuple[dict, str]:
    from bench import console_scale

    churn = console_scale.parse_case(console_scale.CHURN_CASE, 500.0)
    top = (10_000, 512, 1000.0) if quick else (50_000, 512, 1000.0)
    res = console_scale.run([(4000, 22, 1000.0), churn, top])
    return res, console_scale.table(res)


def _engine(quick: bool) -> tuple[dict, str]:
    from ascend_ext_dev.tiny_engine import vllm_available

    why = vllm_available()
    if why is not None:
        return {"skipped": why}, f"skipped: {why}"
    from bench import engine_bench

    res = engine_bench.run(quick=quick)
    return res, engine_bench.table(res)


def _agent(quick: bool) -> tuple[dict, str]:
    from ascend_ext_dev.tiny_engine import vllm_available

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
    from ascend_ext_dev.tiny_engine import vllm_available

    why = vllm_available()
    if why is not None:
        return {"skipped": why}, f"skipped: {why}"
    from bench import never_worse, nw_results

    res = never_worse.run(quick=quick)
    return res, nw_results.table(res)


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
    "idle_restart": _idle_restart,
    "read_scale": _read_scale,
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
    return sections.parse_md(md.read_text())


def main() -> None:
    """Run the selected benchmarks; print and write a table per benchmark."""
    p = argparse.ArgumentParser(prog="python -m bench")
    p.add_argument("--quick", action="store_true", help="shorter runs (about 3 minutes)")
    p.add_argument("--only", default="", help="comma-separated subset of " + ",".join(BENCHES))
    p.add_argument(
        "--before",
        type=Path,
        help="throughput: another checkout (e.g. main) whose daemon runs in the same run",
    )
    args = p.parse_args()
    BEFORE_ROOT[0] = args.before
    names = [n for n in args.only.split(",") if n] or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(unknown)}")
    previous: dict[str, Any] = {}
    if args.only and (RESULTS / "latest.json").exists():
        # A partial run replaces its own sections and keeps the others' last runs.
        previous = json.loads((RESULTS / "latest.json").read_text())
    cpus = os.cpu_count() or 1
    results: dict[str, Any] = {
        **previous,
        "machine": {
            "cpus": cpus,
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "updated": sections.now_utc(),
    }
    # Run-wide start and load figures described only the first run of a partial-run series;
    # each section carries its own now.
    for stale in ("started", "quick"):
        results.pop(stale, None)
    texts: dict[str, str] = dict(previous.get("_texts", {})) or _md_sections(previous)
    for name in names:
        print(f"== {name} ...", flush=True)
        t0, started, load = time.perf_counter(), sections.now_utc(), os.getloadavg()
        res, text = BENCHES[name](args.quick)
        section = sections.record(
            results,
            name,
            res,
            started=started,
            loadavg_start=load,
            loadavg_end=os.getloadavg(),
            cpus=cpus,
            wall_s=time.perf_counter() - t0,
            quick=args.quick,
        )
        texts[name] = text
        print(sections.run_line(section), flush=True)
        print(text, flush=True)
    results["_texts"] = texts
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latest.json").write_text(json.dumps(results, indent=1, default=str))
    (RESULTS / "latest.md").write_text(sections.render_md(results, texts, list(BENCHES)))
    print(f"wrote {RESULTS / 'latest.json'} and {RESULTS / 'latest.md'}")


if __name__ == "__main__":
    main()
