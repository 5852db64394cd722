"""bench.never_worse's report: the markdown table of a run and the results files that keep
the last runs, each its own section."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from bench import nw_workload as nw
from bench import sections

RESULTS = Path(__file__).resolve().parent / "results"
WORKLOADS = ("a", "b", "c", "d")

NAMES = {
    "a": "(a) Agents SDK chat pattern",
    "b": "(b) agents whose conversations end",
    "c": "(c) plain multi-turn chat",
    "d": "(d) engine benchmark",
}


def table(res: dict[str, Any]) -> str:
    """Markdown: per workload, both sides, the ratios and whether each target is met."""
    rows = [
        "| workload | side | recomputed | prompt | latency mean / p90 ms | calls "
        "| Failed to allocate | run-end suspends / closes | mispredictions |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for tag in WORKLOADS:
        if tag not in res:
            continue
        w = res[tag]
        for side in ("alone", "steered"):
            s = w[side]
            runs = w.get("runs", {}).get(side, [])
            ends = (
                f"{sum(r.get('suspends_run_end') or 0 for r in runs):g} / "
                f"{sum(r.get('closes_run_end') or 0 for r in runs):g}"
                if runs
                else "-"
            )
            rows.append(
                f"| {NAMES[tag]} | {side} | {s['recomputed_tokens']} | {s['prompt_tokens']} | "
                f"{s['latency_mean_ms']} / {s['latency_p90_ms']} | {s['calls']} | "
                f"{s['failed_to_allocate']} | {ends} | {s.get('mispredictions') or '-'} |"
            )
        r = w["ratios"]
        line = (
            f"{NAMES[tag]}: steered/alone recomputed {r['recomputed']}x (target <= "
            f"{nw.TARGETS['recomputed']}), latency mean {r['latency_mean']}x / p90 "
            f"{r['latency_p90']}x (<= {nw.TARGETS['latency_mean']}); never worse: "
            f"{w['never_worse']}"
        )
        if "aim_gain" in w:
            line += f"; gain {w['recompute_gain']} (aim >= {w['aim_gain']}: {w['aim_met']})"
        if "aim_latency" in w:
            line += f"; latency aim <= {w['aim_latency']}x: {w['aim_latency_met']}"
        if "engine_bench" in w:
            line += f"; engine_bench {w['engine_bench']}"
        notes.append(line + f"; {w.get('wall_s', '-')} s.")
    head = (
        f"{res.get('topology', 'ascend_ext')} topology, "
        f"{'quick' if res['quick'] else 'full'} shape, {res['pairs']} pair(s) for (a)/(c), "
        f"time scale {res['time_scale']}, load average {res['loadavg_start'][0]:.2f} at start, "
        f"{res['loadavg_end'][0]:.2f} at end."
    )
    return "\n".join([head, "", *rows, "", *notes])


#: Runs a results file keeps (newest first): a run of some workloads leaves the others' last.
KEEP_RUNS = 8


def write_results(res: dict[str, Any], text: str, started: str, wall_s: float) -> Path:
    """bench/results/never_worse[-stock]-{quick,full}.{json,md}: this run as one section,
    with its start time and load (bench.sections), ahead of the earlier runs' sections."""
    topology = "" if res["topology"] == "ascend_ext" else f"-{res['topology']}"
    name = f"never_worse{topology}-{'quick' if res['quick'] else 'full'}"
    results: dict[str, Any] = {}
    section = sections.record(
        results,
        name,
        res,
        started=started,
        loadavg_start=res["loadavg_start"],
        loadavg_end=res["loadavg_end"],
        cpus=os.cpu_count() or 1,
        wall_s=wall_s,
        quick=res["quick"],
    )
    RESULTS.mkdir(exist_ok=True)
    js, md = RESULTS / f"{name}.json", RESULTS / f"{name}.md"
    runs = [section]
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        runs += list(json.loads(js.read_text())["runs"])
    only = ",".join(t for t in WORKLOADS if t in res)
    head = f"## {started}: {only}\n\n{sections.run_line(section)}\n\n{text}\n"
    earlier = ""
    with contextlib.suppress(OSError):
        old = md.read_text()
        # a file from before sections: one run, its date in its title
        earlier = old.partition("\n## ")[2] or old.lstrip("# ")
    kept = ("\n## " + earlier).split("\n## ")[1:KEEP_RUNS] if earlier else []
    body = "".join(f"\n## {k}" for k in kept)
    js.write_text(json.dumps({"runs": runs[:KEEP_RUNS]}, indent=1, default=str))
    md.write_text(f"# never worse, {res['topology']} topology (newest run first)\n\n{head}{body}")
    return RESULTS / name
