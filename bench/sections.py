"""bench/results/latest.{json,md}: one run per section, each with its start time and load."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

# Keys every section carries about its own run (not the benchmark's figures).
META_KEYS = ("started", "loadavg_start", "loadavg_end", "cpus", "under_load", "wall_s", "quick")


def now_utc() -> str:
    """The wall clock as the results files spell it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def under_load(loadavg: tuple[float, float, float] | list[float], cpus: int) -> bool:
    """True where other work held the cores when the benchmark started.

    The 1-minute load average at the start is the other work's: by the end it also counts
    the benchmark's own processes, which a loaded reading there would only restate.
    """
    return float(loadavg[0]) > max(1, cpus)


def record(
    results: dict[str, Any],
    name: str,
    res: dict[str, Any],
    *,
    started: str,
    loadavg_start: tuple[float, float, float] | list[float],
    loadavg_end: tuple[float, float, float] | list[float],
    cpus: int,
    wall_s: float,
    quick: bool = False,
) -> dict[str, Any]:
    """Replace section `name` of `results` whole with this run's `res` and its run's facts.

    Nothing of an earlier run of the same benchmark survives: a key that run wrote and this
    one did not (a renamed figure) would otherwise sit beside this run's as if measured with it.
    """
    section = {k: v for k, v in res.items() if k not in META_KEYS}
    section.update(
        started=started,
        loadavg_start=[round(float(x), 2) for x in loadavg_start],
        loadavg_end=[round(float(x), 2) for x in loadavg_end],
        cpus=cpus,
        under_load=under_load(loadavg_start, cpus),
        wall_s=round(wall_s, 1),
        quick=quick,
    )
    results[name] = section
    return section


def run_line(section: dict[str, Any]) -> str:
    """One italic line under a section's heading: when it ran and how loaded the box was."""
    if "started" not in section or "loadavg_start" not in section:
        return "_run of unknown start and load (written before sections carried them)_"
    cpus = section.get("cpus") or os.cpu_count() or 1
    load = float(section["loadavg_start"][0])
    flag = under_load(section["loadavg_start"], cpus)
    line = f"_run {section['started']}, load {load:.1f} on {cpus} CPUs at start"
    if flag:
        line += " — **measured under load**: its ratios are lower than an idle machine's"
    return line + "_"


def render_md(results: dict[str, Any], texts: dict[str, str], order: list[str]) -> str:
    """latest.md: a header, then each section's run line and table, in `order`."""
    machine = results.get("machine", {})
    cpus = machine.get("cpus") or os.cpu_count()
    parts = [
        f"# ram-a-kv benchmarks ({cpus} CPUs; each section is one run, its start and load "
        "under its heading)\n\n"
        "Every speed figure is a ratio against a reference measured in the same run.\n"
    ]
    # Sections a benchmark's own command line recorded (one per run) follow the suite's.
    for name in [*order, *sorted(set(texts) - set(order))]:
        if name not in texts:
            continue
        section = results.get(name, {})
        parts.append(f"## {name}\n\n{run_line(section)}\n\n{texts[name]}\n")
    return "\n".join(parts)


def parse_md(md: str) -> dict[str, str]:
    """The per-benchmark tables of a latest.md, without the run line `render_md` adds."""
    out: dict[str, str] = {}
    for block in md.split("\n## ")[1:]:
        name, _, text = block.partition("\n\n")
        text = text.strip()
        if text.startswith("_run "):
            text = text.partition("\n\n")[2].strip()
        out[name.strip()] = text
    return out


def save_run(
    results_dir: Path,
    name: str,
    res: dict[str, Any],
    text: str,
    *,
    started: str,
    loadavg_start: tuple[float, float, float] | list[float],
    wall_s: float,
) -> dict[str, Any]:
    """One run of one benchmark, started by its own command line, into
    ``results_dir``/latest.{json,md} as section ``name`` (replaced whole, the others kept,
    in the order they are written in)."""
    path = results_dir / "latest.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    texts: dict[str, str] = dict(results.get("_texts", {}))
    if not texts and (results_dir / "latest.md").exists():
        texts = parse_md((results_dir / "latest.md").read_text())
    section = record(
        results,
        name,
        res,
        started=started,
        loadavg_start=loadavg_start,
        loadavg_end=os.getloadavg(),
        cpus=os.cpu_count() or 1,
        wall_s=wall_s,
    )
    texts[name] = text
    results["_texts"] = texts
    results["updated"] = now_utc()
    results_dir.mkdir(exist_ok=True)
    path.write_text(json.dumps(results, indent=1, default=str))
    (results_dir / "latest.md").write_text(render_md(results, texts, list(texts)))
    return section


def record_run(
    results: Path,
    name: str,
    data: dict[str, Any],
    text: str,
    *,
    started: str,
    loadavg_start: tuple[float, float, float] | list[float],
    since: float,
) -> None:
    """A benchmark's ``--record NAME``: :func:`save_run` (``since``: the run's perf_counter
    start), then its run line printed."""
    section = save_run(
        results,
        name,
        data,
        text,
        started=started,
        loadavg_start=loadavg_start,
        wall_s=time.perf_counter() - since,
    )
    print(run_line(section), flush=True)
