"""Replays a trace against the store, alone (LRU) or steered by the real daemon (Daemon.handle)."""

from __future__ import annotations

import heapq
import logging
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.cache_sim.cost_model import CostModel
from bench.cache_sim.policy import Clock, Policy, SimBackend
from bench.cache_sim.store import Request, TwoTierStore
from bench.cache_sim.workload import (
    CLOSE,
    FORK,
    FORK_END,
    REQUEST,
    SUSPEND,
    TURN_END,
    Event,
    Trace,
)
from ramakv_daemon.bootstrap import Daemon, build
from ramakv_daemon.config import Config
from ramakv_daemon.core.session import Session
from ramakv_daemon.ports import LoadedForks, OutboxRow, StoredAnswer, WriteBatch

# hints and daemon events go before the engine's lookup at the same instant
_DAEMON, _LOOKUP, _STORE = 0, 1, 2


class MemoryStore:
    """A ports.SessionStore kept in memory: the simulation needs no disk durability."""

    async def open(self) -> None:
        return None

    async def load_all(self) -> list[Session]:
        return []

    async def load_outbox(self) -> list[OutboxRow]:
        return []

    async def load_forks(self) -> LoadedForks:
        return LoadedForks([], 1)

    async def load_event_ids(self, limit: int) -> list[StoredAnswer]:
        return []

    async def write(self, batch: WriteBatch) -> None:
        return None

    async def close(self) -> None:
        return None


@dataclass(slots=True)
class RunResult:
    """One replay: chunk counts per tier, modelled TTFT, queue and prefetch counters."""

    policy: str
    capacity: float
    lead_s: float
    turns: int = 0
    ddr: int = 0
    ssd: int = 0
    recompute: int = 0
    new_tokens: int = 0
    ttft_mean_ms: float = 0.0
    ttft_p50_ms: float = 0.0
    ttft_p99_ms: float = 0.0
    ttft_oracle_ms: float = 0.0  # mean TTFT if every reused chunk were a DDR hit (a bound)
    ssd_util: float = 0.0
    daemon_events: int = 0
    daemon_errors: int = 0
    wall_s: float = 0.0
    store: dict[str, Any] = field(default_factory=dict)
    backend_calls: dict[str, int] = field(default_factory=dict)

    @property
    def reused(self) -> int:
        return self.ddr + self.ssd + self.recompute

    @property
    def hit_rate(self) -> float:
        """Reused chunks served from DDR, as a fraction of all reused chunks."""
        return self.ddr / self.reused if self.reused else 0.0

    @property
    def slow_path(self) -> int:
        """Critical-path SSD loads plus recomputed chunks."""
        return self.ssd + self.recompute

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(hit_rate=round(self.hit_rate, 4), slow_path=self.slow_path)
        return d


def _payload(kind: str, e: Event) -> dict[str, Any]:
    if kind == TURN_END:
        return {
            "type": "turn_end",
            "session_id": e.sid,
            "kv_transfer_params": {"chunk_hashes": [f"{c:x}" for c in e.store]},
        }
    return {"type": kind, "session_id": e.sid}


_DAEMON_TYPE = {
    TURN_END: TURN_END,
    FORK: "session_fork",
    FORK_END: "session_fork_end",
    SUSPEND: "session_suspend",
    CLOSE: "session_close",
}


Action = tuple[float, int, int, str, Event]


def _actions(trace: Trace, policy: Policy, lead_s: float) -> list[Action]:
    """Time-ordered actions: daemon events (steered only) and the engine's lookups."""
    out: list[Action] = []
    for e in trace.events:
        if e.kind == REQUEST:
            out.append((e.t, _LOOKUP, e.seq, REQUEST, e))
            if not policy.steered:
                continue
            if e.restore:
                out.append((max(0.0, e.t - lead_s), _DAEMON, e.seq, "snapshot_restore", e))
                continue
            earliest = e.tool_start if e.tool_start is not None else 0.0
            at_request = max(earliest, e.t - lead_s)
            if policy.hint in ("tool", "both") and e.tool_start is not None:
                out.append((e.tool_start, _DAEMON, e.seq, "turn_start", e))
                if policy.hint == "both" and at_request > e.tool_start:
                    out.append((at_request, _DAEMON, e.seq, "turn_start", e))
            else:
                out.append((at_request, _DAEMON, e.seq, "turn_start", e))
        elif policy.steered:
            out.append((e.t, _DAEMON, e.seq, _DAEMON_TYPE[e.kind], e))
    out.sort(key=lambda a: (a[0], a[1], a[2]))
    return out


async def replay(
    trace: Trace,
    policy: Policy,
    capacity: float,
    lead_s: float,
    cost: CostModel,
    ssd_factor: float = 2.0,
) -> RunResult:
    """Replay ``trace`` with DDR = ``capacity`` x peak working set; returns the counts."""
    started = time.perf_counter()
    ddr_cap = max(1, int(capacity * trace.peak_working_set))
    ssd_cap = int(ssd_factor * trace.peak_working_set)
    store = TwoTierStore(
        ddr_cap, ssd_cap, cost.ssd_chunk_s, priority=policy.need_order, recheck=policy.recheck
    )
    clock = Clock()
    res = RunResult(policy.name, capacity, lead_s)
    ttfts: list[float] = []
    oracle = 0.0
    heap: list[tuple[float, int, int, str, Any]] = []
    svc: Daemon | None = None
    backend: SimBackend | None = None
    if policy.steered:
        backend = SimBackend(store, policy, clock, lead_s)
        budget = max(1, int(policy.budget * ddr_cap)) if policy.budget else 0
        config = Config(
            noop_backend=True,
            turn_start_prefetch=policy.turn_start_prefetch,
            session_store_path=":memory:",
            ddr_budget_chunks=budget,
            budget_check_interval_s=0.0,
        )
        svc = build(config, MemoryStore(), backend)
        await svc.start()
    seq = len(trace.events)

    def finish(req: Request) -> None:
        nonlocal seq
        e, hits, loads, rec = req.data  # type: ignore[misc]
        ttft = cost.ttft(hits, loads, rec, e.new_tokens, req.ready - req.t)
        ttfts.append(ttft)
        seq += 1
        heapq.heappush(heap, (req.t + ttft, _STORE, seq, "store", e))

    actions = _actions(trace, policy, lead_s)
    i = 0
    while True:
        t_act = actions[i][0] if i < len(actions) else float("inf")
        t_heap = heap[0][0] if heap else float("inf")
        t_ssd = store.next_time()
        t_ssd = float("inf") if t_ssd is None else t_ssd
        t = min(t_act, t_heap, t_ssd)
        if t == float("inf"):
            break
        clock.now = t
        if t_ssd <= t_act and t_ssd <= t_heap:
            store.step()
            continue
        if t_heap <= t_act:
            _, _, _, _, e = heapq.heappop(heap)
            store.write(e.store)
            continue
        _, _, _, kind, e = actions[i]
        i += 1
        if kind == REQUEST:
            req = Request(t, 0, t, finish)
            hits, loads, rec = store.lookup(e.prefix, req)
            req.data = (e, hits, loads, rec)
            res.turns += 1
            res.ddr += hits
            res.ssd += loads
            res.recompute += rec
            res.new_tokens += e.new_tokens
            oracle += cost.ttft(hits + loads + rec, 0, 0, e.new_tokens, 0.0)
            if req.outstanding == 0:
                finish(req)
            continue
        assert svc is not None
        status, body = await svc.handle(_payload(kind, e))
        res.daemon_events += 1
        if not body.get("ok"):
            res.daemon_errors += 1
            if res.daemon_errors <= 3:
                logging.getLogger("cache_sim").warning("daemon refused %s: %s", kind, body)
        await svc.default.dispatcher.drain()
    if svc is not None:
        await svc.stop()
    res.ttft_mean_ms = statistics.fmean(ttfts) * 1000 if ttfts else 0.0
    res.ttft_oracle_ms = oracle / max(1, res.turns) * 1000
    if ttfts:
        q = statistics.quantiles(ttfts, n=100)
        res.ttft_p50_ms, res.ttft_p99_ms = q[49] * 1000, q[98] * 1000
    res.ssd_util = store.stats.ssd_busy_s / trace.params.duration_s
    res.store = asdict(store.stats)
    res.store.update(ddr_cap=ddr_cap, ssd_cap=ssd_cap)
    res.backend_calls = dict(backend.calls) if backend else {}
    res.wall_s = time.perf_counter() - started
    return res
