"""Steering policies and the simulated Backend the real daemon drives (ports.Backend)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench.cache_sim.store import TwoTierStore
from ramakv_daemon.ports import Backend, BackendResult, ChunkLocations, EvictMode


@dataclass(frozen=True, slots=True)
class Policy:
    """How a run is steered.

    Attributes:
        name: label in tables and plots.
        steered: False = LRU alone (no daemon); True = the real daemon's calls applied.
        turn_start_prefetch: the daemon's config key; False leaves only evict/demote (and
            snapshot_restore's prefetch).
        recheck: the backend skips a prefetched chunk already in DDR when the queue
            reaches it (as ascend_ext's prefetch worker does); False = "prefetch
            everything", re-reading DDR-resident chunks from SSD.
        skip_touch: at the prefetch call, chunks already in DDR are not queued but moved
            to the DDR LRU's most-recent end, so they survive until the lookup.
        need_order: the SSD queue serves demand loads first, then prefetches by deadline
            (the request's expected lookup time), instead of first-come first-served.
        cap: stop queuing a prefetch list once the queue ahead is so long that the rest
            could not land before the deadline (saturation guard).
        hint: "request" = turn_start sent L before the lookup (when the request leaves);
            "tool" = sent when the tool call starts instead; "both" = at both moments.
        budget: the daemon's ddr_budget_chunks as a fraction of DDR capacity (0 = off):
            the daemon demotes whole idle sessions' private chunks in retention order.
    """

    name: str
    steered: bool = True
    turn_start_prefetch: bool = True
    recheck: bool = True
    skip_touch: bool = False
    need_order: bool = False
    cap: bool = False
    hint: str = "request"
    budget: float = 0.0


LRU = Policy("LRU alone", steered=False)
# The variants, each adding one thing to the one before (the last is the default steering).
NAIVE = Policy("prefetch everything", recheck=False)
ASCEND_EXT = Policy("daemon + ascend_ext")
EVICT_ONLY = Policy("evict/demote only", turn_start_prefetch=False)
SKIP_TOUCH = Policy("+ skip/touch DDR", skip_touch=True)
NEED_ORDER = Policy("+ need order", skip_touch=True, need_order=True)
CAPPED = Policy("+ saturation cap", skip_touch=True, need_order=True, cap=True)
TOOL_HINT = Policy("+ hint at tool start", skip_touch=True, need_order=True, hint="tool")
BOTH_HINTS = Policy(
    "+ hint at tool start and request", skip_touch=True, need_order=True, hint="both"
)
BUDGET = Policy("+ DDR budget 90%", skip_touch=True, need_order=True, budget=0.9)
STEERED = NEED_ORDER
VARIANTS = (
    EVICT_ONLY,
    NAIVE,
    ASCEND_EXT,
    SKIP_TOUCH,
    NEED_ORDER,
    CAPPED,
    TOOL_HINT,
    BOTH_HINTS,
    BUDGET,
)


class Clock:
    """Simulated time, advanced by the runner."""

    def __init__(self) -> None:
        self.now = 0.0


class SimBackend(Backend):
    """A ports.Backend that applies the daemon's calls to the simulated store at sim time.

    It models the ascend_ext memory API (/memory/prefetch, /memory/evict with
    DELETE = every tier and DEMOTE = out of DDR, kept on disk, /memory/query), plus the
    policy's backend-side improvements. Prefetch deadlines are ``now + lead_s``: the
    backend does not know the request's lookup time, only the configured lead time.
    """

    name = "cache_sim"

    def __init__(self, store: TwoTierStore, policy: Policy, clock: Clock, lead_s: float) -> None:
        self.store, self.policy, self.clock, self.lead_s = store, policy, clock, lead_s
        self.calls = {"prefetch": 0, "evict_delete": 0, "evict_demote": 0, "query": 0}

    async def prefetch(self, chunk_hashes: Sequence[str], tag: str) -> BackendResult:
        self.calls["prefetch"] += 1
        st, pol, now = self.store, self.policy, self.clock.now
        deadline = now + self.lead_s
        chunks = [int(h, 16) for h in chunk_hashes]
        ahead = st.backlog_s(now, deadline) if pol.cap else 0.0
        for i, c in enumerate(chunks):
            if pol.skip_touch and st.touch(c):
                st.stats.prefetch_skipped_ddr += 1
                continue
            if c in st.pending:
                continue
            if c not in st.ssd:
                st.stats.prefetch_skipped_missing += 1
                continue
            if pol.cap:
                if now + ahead + st.chunk_s > deadline:
                    st.stats.prefetch_dropped_cap += len(chunks) - i
                    break
                ahead += st.chunk_s
            st.enqueue(c, False, deadline, now)
        return BackendResult(True, 200)

    async def evict(self, chunk_hashes: Sequence[str], mode: EvictMode) -> BackendResult:
        chunks = [int(h, 16) for h in chunk_hashes]
        if mode is EvictMode.DEMOTE:
            self.calls["evict_demote"] += 1
            self.store.demote(chunks)
        else:
            self.calls["evict_delete"] += 1
            self.store.delete(chunks)
        return BackendResult(True, 200)

    async def query(self, chunk_hashes: Sequence[str]) -> tuple[BackendResult, ChunkLocations]:
        self.calls["query"] += 1
        locs = {h: self.store.where(int(h, 16)) for h in chunk_hashes}
        return BackendResult(True, 200), ChunkLocations(locs)

    async def close(self) -> None:
        return None
