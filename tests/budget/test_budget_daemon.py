"""The DDR budget in the daemon, against the stand-in LMCache server: what is demoted, where."""

from __future__ import annotations

import asyncio
import time

from support.ns_rig import Rig, config, ident

from ramakv_protocol.conformance import problems

CPU = "LocalCPUBackend"


def budget_cfg(tmp_path, url, budget=4, **top):
    return config(
        tmp_path,
        [{"name": "qwen", **ident(), "lmcache_url": url, "ddr_budget_chunks": budget}],
        **{"budget_check_interval_s": 0.0, **top},
    )


def demotes(fake) -> list[tuple[list[str], list[str] | None]]:
    return [(b["chunk_hashes"], b.get("locations")) for b in fake.calls("evict")]


async def tick() -> None:
    """Until the wall clock has moved on 2 ms (the next event gets a distinct last_event_ts)."""
    start = time.time()
    while time.time() < start + 0.002:
        await asyncio.sleep(0.001)


async def test_over_budget_demotes_the_longest_idle_private_chunks(tmp_path, two_fakes) -> None:
    fake, _ = two_fakes
    async with Rig(budget_cfg(tmp_path, fake.url)) as r:
        await r.turn_end("s1", ["0001", "0002"])
        await tick()
        await r.turn_end("s2", ["0003", "0004"])
        await tick()
        await r.settle()
        assert fake.calls("evict") == []  # at the budget, not over it
        await r.turn_end("s3", ["0005", "0001"])  # 5 chunks > 4: s1 is the longest idle
        await r.settle()
        # Only s1's private chunk: 0001 is shared with s3, which is active.
        assert demotes(fake) == [(["0002"], [CPU])]
        ns = r.svc.namespaces[r.svc.namespaces.default]
        assert ns.budget.demoted == {"s1"}
        # The refcounts are untouched: demotion is not eviction.
        assert r.svc.default.manager.refcounts.as_dict() == {
            "0001": 2,
            "0002": 1,
            "0003": 1,
            "0004": 1,
            "0005": 1,
        }
        fake.requests.clear()
        # s1 comes back: its map is prefetched; s1 is now in flight, so s2 goes instead.
        assert (await r.ev("turn_start", session_id="s1"))["prefetch_count"] == 2
        await r.settle()
        assert fake.calls("prefetch")[0]["chunk_hashes"] == ["0001", "0002"]
        assert demotes(fake) == [(["0003", "0004"], [CPU])]
        assert ns.budget.demoted == {"s2"} and set(ns.budget.in_flight) == {"s1"}


async def test_turn_in_flight_is_never_demoted(tmp_path, two_fakes) -> None:
    fake, _ = two_fakes
    async with Rig(budget_cfg(tmp_path, fake.url, budget=2)) as r:
        await r.turn_end("old", ["0001", "0002"])
        await r.ev("turn_start", session_id="old")  # in flight from now on
        await tick()
        await r.turn_end("new", ["0003"])  # 3 > 2, but the only other one is in flight
        await r.settle()
        assert demotes(fake) == [(["0003"], [CPU])]
        await r.turn_end("old", ["0001", "0002"])  # the turn ends
        await tick()
        await r.turn_end("x", ["0004"])
        await r.settle()
        assert (["0001", "0002"], [CPU]) in demotes(fake)


async def test_suspended_sessions_go_first(tmp_path, two_fakes) -> None:
    fake, _ = two_fakes
    async with Rig(budget_cfg(tmp_path, fake.url, budget=3)) as r:
        await r.turn_end("idle", ["0001"])
        await tick()
        await r.turn_end("parked", ["0002", "0003"])
        await r.ev("session_fork", session_id="parked")  # the fork keeps 0002, 0003 held
        await r.ev("session_suspend", session_id="parked")
        await tick()
        await r.turn_end("busy", ["0004"])  # 4 > 3: the suspended one goes first
        await r.settle()
        assert demotes(fake) == [(["0002", "0003"], [CPU])]


async def test_demoted_session_is_prefetched_back_even_without_turn_start_prefetch(
    tmp_path, two_fakes
) -> None:
    fake, _ = two_fakes
    async with Rig(budget_cfg(tmp_path, fake.url, budget=1, turn_start_prefetch=False)) as r:
        await r.turn_end("a", ["0001"])
        await tick()
        await r.turn_end("b", ["0002"])
        await r.settle()
        assert demotes(fake) == [(["0001"], [CPU])]
        # The event's reply is unchanged (prefetch of the map is off) ...
        assert await r.ev("turn_start", session_id="a") == {
            "prefetch_sent": False,
            "prefetch_count": 0,
        }
        await r.settle()
        # ... but the demoted session is brought back.
        assert [b["chunk_hashes"] for b in fake.calls("prefetch")] == [["0001"]]
        # a is in flight now, so b (idle) made room for it, and comes back in turn.
        assert demotes(fake) == [(["0001"], [CPU]), (["0002"], [CPU])]
        await r.ev("turn_start", session_id="b")
        await r.settle()
        assert [b["chunk_hashes"] for b in fake.calls("prefetch")] == [["0001"], ["0002"]]
        # Both in flight: over budget, nothing left to demote (a warning, no demotion).
        assert len(demotes(fake)) == 2


async def test_budget_trace_record_marks_demote(tmp_path, two_fakes) -> None:
    fake, _ = two_fakes
    async with Rig(budget_cfg(tmp_path, fake.url, budget=1)) as r:
        seen: list[dict] = []
        publish = r.svc.trace.publish

        def spy(record, *touched):
            seen.append(record)
            return publish(record, *touched)

        r.svc.trace.publish = spy  # type: ignore[method-assign]
        await r.turn_end("a", ["0001"])
        await tick()
        await r.turn_end("b", ["0002"])
        rec = [x for x in seen if x["kind"] == "budget"]
        assert len(rec) == 1 and rec[0]["victims"] == ["a"] and rec[0]["demote"] == ["0001"]
        assert rec[0]["usage_before"] == 2 and rec[0]["usage_after"] == 1
        assert rec[0]["namespace"] == r.svc.namespaces.default
        assert problems(rec[0]) == []  # the shape ramakv_protocol.records says
        await r.settle()


async def test_budget_passes_are_rate_limited(tmp_path, two_fakes) -> None:
    fake, _ = two_fakes
    async with Rig(budget_cfg(tmp_path, fake.url, budget=1, budget_check_interval_s=3600.0)) as r:
        await r.turn_end("a", ["0001"])
        await tick()
        await r.turn_end("b", ["0002"])  # first pass: a goes
        await tick()
        await r.turn_end("c", ["0003"])  # within the interval: no pass
        await r.settle()
        assert demotes(fake) == [(["0001"], [CPU])]


async def test_no_budget_no_demotion(tmp_path, two_fakes) -> None:
    fake, _ = two_fakes
    async with Rig(budget_cfg(tmp_path, fake.url, budget=0)) as r:
        for i in range(5):
            await r.turn_end(f"s{i}", [f"000{i}"])
        await r.settle()
        assert fake.calls("evict") == []
