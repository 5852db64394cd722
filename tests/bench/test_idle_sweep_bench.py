"""bench.idle_sweep on a small population: every side does the same work (counts, never
timings: the stall figures are the benchmark's, in bench/results)."""

from __future__ import annotations

from bench import idle_sweep


async def test_every_side_suspends_and_closes_the_same_sessions() -> None:
    res = await idle_sweep.measure(sessions=200, refs=8)
    for side in ("sliced", "one_piece", "by_host"):
        r = res[side]
        assert (r["suspended"], r["closed"], r["failed"]) == (80, 20, 0), side
    assert "sliced / by a host" in idle_sweep.table(res)
