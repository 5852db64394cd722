"""Synthetic agent workload: a seeded, open-loop trace of timed session and request events."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field

from bench.cache_sim.cost_model import CHUNK_TOKENS, CostModel

# Event kinds. "request" is the engine's lookup of a prompt (the host's turn_start or
# snapshot_restore precedes it by the lead time L, chosen by the runner, not here).
REQUEST, TURN_END, FORK, FORK_END, SUSPEND, CLOSE = (
    "request",
    "turn_end",
    "fork",
    "fork_end",
    "suspend",
    "close",
)


@dataclass(frozen=True, slots=True)
class WorkloadParams:
    """Workload shape. Sources, or ASSUMPTION where no published figure was at hand.

    - tasks_mean 3.5: user turns per conversation. ShareGPT averages 3.51 turns per
      conversation (ShareChat, Yan et al., arXiv:2512.17843, Table 1); CachedAttention
      (Gao et al., USENIX ATC'24, section 2) reports 73% of ShareGPT conversations are
      multi-turn. Here each user turn starts an agent task.
    - agent_turns_mean 5: model calls per task (tool loop). ASSUMPTION; coding agents on
      SWE-bench use tens of calls per issue (Continuum, Li et al., arXiv:2511.02230), chat
      assistants with tools a few.
    - user_tokens median 80, output_tokens median 200, tool_tokens median 400 (lognormal,
      sigma below): ShareGPT user prompts and replies are a few hundred tokens
      (CachedAttention section 2 and its ShareGPT figures show the history growing to
      thousands of tokens within ~10-20 turns); tool outputs (file reads, test logs) are
      an ASSUMPTION.
    - system_tokens 2048: a shared agent system prompt + tool schemas (ASSUMPTION; the
      throughput benchmark uses the same 8-chunk shared prefix).
    - tool_s median 2 s, sigma 1.0: tool-call durations are seconds with a long tail
      (Continuum, arXiv:2511.02230, measures SWE-bench/BFCL tool calls; ASSUMPTION for the
      exact distribution).
    - think_s median 45 s: user think time between tasks (ASSUMPTION, order of a human
      reading a reply and typing the next message).
    - p_suspend 0.2, away_s median 600 s: a user leaves and comes back later; the host
      suspends after suspend_after_s of idleness (ASSUMPTION).
    - p_fork 0.05, sub_turns_mean 4: a tool call that spawns a sub-agent on a copy of the
      parent's context (ASSUMPTION).
    - compact_tokens 24576: context compaction to system prompt + a 2,048-token summary
      once the history passes 24k tokens (ASSUMPTION; agents compact near a budget).
    """

    sessions: int = 128
    duration_s: float = 1800.0
    tasks_mean: float = 3.5
    agent_turns_mean: float = 5.0
    system_tokens: int = 2048
    user_tokens_median: float = 80.0
    output_tokens_median: float = 200.0
    tool_tokens_median: float = 400.0
    tokens_sigma: float = 0.8
    tool_s_median: float = 2.0
    tool_s_sigma: float = 1.0
    think_s_median: float = 45.0
    think_s_sigma: float = 0.8
    p_suspend: float = 0.2
    suspend_after_s: float = 30.0
    away_s_median: float = 600.0
    p_fork: float = 0.05
    sub_turns_mean: float = 4.0
    compact_tokens: int = 24576
    summary_tokens: int = 2048
    new_session_gap_s: float = 5.0


@dataclass(slots=True)
class Event:
    """One trace event.

    For a request: ``prefix`` is the reusable part of the prompt (the session's last
    stored map, cut at the first chunk that changed), ``store`` the full chunks of the
    prompt stored after prefill, ``new_tokens`` the tokens never seen before, and
    ``tool_start`` when the tool call before it began (None after a user message).
    For turn_end: ``store`` is the new map. ``restore`` marks the first request after a
    suspend (the host sends snapshot_restore instead of turn_start).
    """

    t: float
    kind: str
    sid: str
    prefix: tuple[int, ...] = ()
    store: tuple[int, ...] = ()
    new_tokens: int = 0
    tool_start: float | None = None
    restore: bool = False
    seq: int = 0


@dataclass(slots=True)
class Trace:
    """A generated workload, sorted by time."""

    events: list[Event]
    peak_working_set: int
    distinct_chunks: int
    requests: int
    params: WorkloadParams = field(default_factory=WorkloadParams)


class _Gen:
    """Generates the sessions of one slot; chunk ids come from a shared counter."""

    def __init__(
        self,
        p: WorkloadParams,
        cost: CostModel,
        rng: random.Random,
        ids: itertools.count,
        out: list[Event],
    ) -> None:
        self.p, self.cost, self.rng, self.ids, self.out = p, cost, rng, ids, out
        self.sys_chunks = tuple(range(p.system_tokens // CHUNK_TOKENS))

    def lognorm(self, median: float, sigma: float) -> float:
        return median * math.exp(self.rng.gauss(0.0, sigma))

    def geometric(self, mean: float) -> int:
        """At least 1, mean ``mean``."""
        q = 1.0 - 1.0 / mean
        n = 1
        while self.rng.random() < q:
            n += 1
        return n

    def tokens(self, median: float) -> int:
        return max(1, int(self.lognorm(median, self.p.tokens_sigma)))


class _Session:
    """One session's context: token count, chunk ids of its full chunks, stored map."""

    def __init__(
        self, g: _Gen, sid: str, chunks: list[int], tokens: int, stored: tuple[int, ...]
    ) -> None:
        self.g, self.sid, self.chunks, self.tokens, self.stored = g, sid, chunks, tokens, stored

    def turn(
        self, t: float, add_tokens: int, tool_start: float | None, restore: bool = False
    ) -> float:
        """Emit a request at ``t`` and its turn_end; returns the turn_end time."""
        g, p = self.g, self.g.p
        if self.tokens > p.compact_tokens:
            self.chunks = list(g.sys_chunks)
            self.tokens = p.system_tokens + p.summary_tokens
        prompt = self.tokens + add_tokens
        n_full = prompt // CHUNK_TOKENS
        while len(self.chunks) < n_full:
            self.chunks.append(next(g.ids))
        store = tuple(self.chunks[:n_full])
        k = 0
        for a, b in zip(self.stored, store, strict=False):
            if a != b:
                break
            k += 1
        prefix = self.stored[:k]
        new_tokens = prompt - k * CHUNK_TOKENS
        g.out.append(Event(t, REQUEST, self.sid, prefix, store, new_tokens, tool_start, restore))
        out_tokens = g.tokens(p.output_tokens_median)
        nominal = g.cost.ttft(len(prefix), 0, 0, new_tokens, 0.0)
        t_end = t + nominal + out_tokens * g.cost.decode_s_per_token
        g.out.append(Event(t_end, TURN_END, self.sid, store=store))
        self.stored = store
        self.tokens = prompt + out_tokens
        return t_end

    def task(self, t: float, restore: bool, depth: int) -> float:
        """A user message then an agent tool loop; returns the last turn_end time."""
        g, p = self.g, self.g.p
        t = self.turn(t, g.tokens(p.user_tokens_median), None, restore)
        for _ in range(g.geometric(p.agent_turns_mean) - 1):
            tool_start = t
            if depth == 0 and g.rng.random() < p.p_fork:
                t = self.sub_agent(t)
                add = g.tokens(p.tool_tokens_median)
            else:
                t += g.lognorm(p.tool_s_median, p.tool_s_sigma)
                add = g.tokens(p.tool_tokens_median)
            t = self.turn(t, add, tool_start)
        return t

    def sub_agent(self, t: float) -> float:
        """Fork a sub-agent on this context; returns when its result is back."""
        g = self.g
        child_id = f"{self.sid}.sub{next(g.ids)}"
        g.out.append(Event(t + 0.001, FORK, self.sid))
        child = _Session(g, child_id, list(self.chunks), self.tokens, self.stored)
        tc = t + 0.01
        tool_start: float | None = None
        for _ in range(g.geometric(g.p.sub_turns_mean)):
            tc = child.turn(tc, g.tokens(g.p.tool_tokens_median), tool_start)
            tool_start = tc
            tc += g.lognorm(g.p.tool_s_median, g.p.tool_s_sigma)
        g.out.append(Event(tc, CLOSE, child_id))
        g.out.append(Event(tc + 0.001, FORK_END, self.sid))
        return tc + 0.01


def _run_slot(g: _Gen, slot: int) -> None:
    p = g.p
    t = g.rng.uniform(0.0, 60.0)
    n = 0
    while t < p.duration_s:
        sid = f"s{slot}-{n}"
        n += 1
        s = _Session(g, sid, list(g.sys_chunks), p.system_tokens, ())
        restore = False
        tasks = g.geometric(p.tasks_mean)
        for i in range(tasks):
            t = s.task(t, restore, 0)
            restore = False
            if i == tasks - 1 or t >= p.duration_s:
                break
            if g.rng.random() < p.p_suspend:
                g.out.append(Event(t + p.suspend_after_s, SUSPEND, sid))
                t += max(p.suspend_after_s + 1.0, g.lognorm(p.away_s_median, 0.7))
                restore = True
            else:
                t += g.lognorm(p.think_s_median, p.think_s_sigma)
        g.out.append(Event(t + 1.0, CLOSE, sid))
        t += 1.0 + g.rng.expovariate(1.0 / p.new_session_gap_s)


def generate(p: WorkloadParams, seed: int = 1, cost: CostModel | None = None) -> Trace:
    """The trace for ``p``; the same seed always gives the same trace."""
    cost = cost or CostModel()
    out: list[Event] = []
    ids = itertools.count(p.system_tokens // CHUNK_TOKENS)
    for slot in range(p.sessions):
        _run_slot(_Gen(p, cost, random.Random(seed * 100_003 + slot), ids, out), slot)
    # Slots draw ids from one counter in slot order, so ids are deterministic per seed.
    events = [e for e in out if e.t < p.duration_s]
    events.sort(key=lambda e: (e.t, e.sid, e.kind))
    for i, e in enumerate(events):
        e.seq = i
    peak, distinct = _working_set(events)
    requests = sum(1 for e in events if e.kind == REQUEST)
    return Trace(events, peak, distinct, requests, p)


def _working_set(events: list[Event]) -> tuple[int, int]:
    """Peak distinct chunks referenced by live (not suspended) sessions and fork holds."""
    refs: dict[int, int] = {}
    maps: dict[str, tuple[int, ...]] = {}
    holds: dict[str, list[tuple[int, ...]]] = {}
    suspended: set[str] = set()
    seen: set[int] = set()
    peak = 0

    def add(chunks: tuple[int, ...], step: int) -> None:
        for c in set(chunks):
            n = refs.get(c, 0) + step
            if n:
                refs[c] = n
            else:
                del refs[c]

    for e in events:
        if e.kind == TURN_END:
            seen.update(e.store)
            if e.sid not in suspended:
                add(maps.get(e.sid, ()), -1)
            suspended.discard(e.sid)
            maps[e.sid] = e.store
            add(e.store, +1)
        elif e.kind == REQUEST and e.restore and e.sid in suspended:
            suspended.discard(e.sid)
            add(maps.get(e.sid, ()), +1)
        elif e.kind == SUSPEND and e.sid not in suspended:
            suspended.add(e.sid)
            add(maps.get(e.sid, ()), -1)
        elif e.kind == FORK:
            hold = maps.get(e.sid, ())
            holds.setdefault(e.sid, []).append(hold)
            add(hold, +1)
        elif e.kind == FORK_END and holds.get(e.sid):
            add(holds[e.sid].pop(), -1)
        elif e.kind == CLOSE:
            if e.sid not in suspended:
                add(maps.pop(e.sid, ()), -1)
            for hold in holds.pop(e.sid, []):
                add(hold, -1)
            suspended.discard(e.sid)
        peak = max(peak, len(refs))
    return peak, len(seen)
