"""Fast checks of the cache simulation: the store model, the SSD queue, workload determinism."""

from __future__ import annotations

import asyncio

from bench.cache_sim.cost_model import CostModel
from bench.cache_sim.policy import LRU, STEERED, Clock, Policy, SimBackend
from bench.cache_sim.runner import replay
from bench.cache_sim.store import Request, TwoTierStore
from bench.cache_sim.workload import REQUEST, WorkloadParams, generate
from ramakv_daemon.ports import EvictMode


def _drain(store: TwoTierStore) -> None:
    while store.next_time() is not None:
        store.step()


def test_ddr_is_lru_and_ssd_keeps_what_ddr_drops() -> None:
    st = TwoTierStore(ddr_cap=2, ssd_cap=10, chunk_s=0.01)
    st.write([1, 2])
    st.touch(1)
    st.write([3])  # evicts 2, the least recently used
    assert list(st.ddr) == [1, 3]
    assert set(st.ssd) == {1, 2, 3}
    assert st.where(2) == ["ssd"]


def test_lookup_prefix_semantics_and_demand_wait() -> None:
    st = TwoTierStore(ddr_cap=10, ssd_cap=10, chunk_s=0.5)
    st.write([1, 2, 3])
    st.ddr.pop(2)  # 2 only on SSD
    st.ssd.pop(3)
    st.ddr.pop(3)  # 3 nowhere: it and everything after are recomputed
    done: list[Request] = []
    req = Request(t=10.0, outstanding=0, ready=10.0, on_ready=done.append)
    assert st.lookup((1, 2, 3, 1), req) == (1, 1, 2)
    assert req.outstanding == 1 and st.next_time() == 10.5
    _drain(st)
    assert done == [req] and req.ready == 10.5 and 2 in st.ddr


def test_one_queue_demand_waits_behind_prefetch_fifo_but_not_with_need_order() -> None:
    for priority, expected in ((False, 3.0), (True, 2.0)):
        st = TwoTierStore(ddr_cap=100, ssd_cap=100, chunk_s=1.0, priority=priority)
        st.write(range(10))
        st.ddr.clear()
        st.enqueue(0, False, 50.0, 0.0)  # in service until 1.0
        st.enqueue(1, False, 50.0, 0.0)
        req = Request(t=0.0, outstanding=0, ready=0.0)
        st.lookup((5,), req)
        while req.outstanding:
            st.step()
        # FIFO: 0, 1, then 5 -> 3.0; need order: 5 right after the read in service -> 2.0
        assert req.ready == expected


def test_prefetch_skips_ddr_at_service_time_and_delete_cancels() -> None:
    st = TwoTierStore(ddr_cap=100, ssd_cap=100, chunk_s=1.0)
    st.write([1, 2, 3])
    st.ddr.pop(2)
    st.ddr.pop(3)
    for c in (1, 2, 3):
        st.enqueue(c, False, 5.0, 0.0)
    st.delete([3])
    _drain(st)
    s = st.stats
    assert (s.prefetch_skipped_ddr, s.prefetch_loaded) == (1, 1)
    assert 2 in st.ddr and 3 not in st.ddr and 3 not in st.ssd


def test_sim_backend_demote_and_touch() -> None:
    st = TwoTierStore(ddr_cap=3, ssd_cap=10, chunk_s=1.0)
    clock = Clock()
    be = SimBackend(st, Policy("t", skip_touch=True), clock, lead_s=1.0)
    st.write([1, 2, 3])
    asyncio.run(be.evict(["1"], EvictMode.DEMOTE))
    assert st.where(1) == ["ssd"]
    asyncio.run(be.prefetch(["2", "1"], "t"))  # 2 touched, 1 queued
    assert list(st.ddr)[-1] == 2 and 1 in st.pending
    asyncio.run(be.evict(["3"], EvictMode.DELETE))
    assert st.where(3) == []


def test_workload_is_deterministic_per_seed() -> None:
    p = WorkloadParams(sessions=8, duration_s=300.0)
    a, b, c = generate(p, 7), generate(p, 7), generate(p, 8)
    key = [(e.t, e.kind, e.sid, e.prefix, e.store) for e in a.events]
    assert key == [(e.t, e.kind, e.sid, e.prefix, e.store) for e in b.events]
    assert key != [(e.t, e.kind, e.sid, e.prefix, e.store) for e in c.events]
    assert a.peak_working_set == b.peak_working_set > 0
    kinds = {e.kind for e in a.events}
    assert REQUEST in kinds and "turn_end" in kinds
    # every request reuses a prefix of the session's last stored map
    assert any(len(e.prefix) > 8 for e in a.events if e.kind == REQUEST)


def test_replay_through_the_real_daemon_is_deterministic_and_helps() -> None:
    p = WorkloadParams(sessions=16, duration_s=240.0)
    trace = generate(p, 3)
    cost = CostModel()
    lru = asyncio.run(replay(trace, LRU, 0.25, 1.0, cost))
    s1 = asyncio.run(replay(trace, STEERED, 0.25, 1.0, cost))
    s2 = asyncio.run(replay(trace, STEERED, 0.25, 1.0, cost))
    assert s1.daemon_errors == 0 and s1.daemon_events > 0
    assert (s1.ddr, s1.ssd, s1.recompute) == (s2.ddr, s2.ssd, s2.recompute)
    assert lru.turns == s1.turns and lru.reused == s1.reused
    assert s1.slow_path <= lru.slow_path
    assert s1.backend_calls["prefetch"] > 0
