"""The engine benchmark's default shape: plain LRU keeps dead chunks and loses live ones."""

from __future__ import annotations

from bench.engine_bench import floor_tokens
from bench.engine_lru import live_chunks_peak, lru_recomputed
from bench.engine_workload import Shape, schedule


def test_live_set_fits_the_disk_tier_only_if_dead_chunks_go() -> None:
    shape = Shape()
    steps = schedule(shape)
    peak = live_chunks_peak(steps)
    assert shape.ddr_chunks < peak <= shape.disk_chunks
    floor = floor_tokens(steps)
    # Dropping closed sessions' chunks leaves only the unavoidable recompute ...
    assert lru_recomputed(steps, shape.disk_chunks, drop_closed=True) == floor
    # ... while plain LRU evicts the paused sessions' contexts: at least twice the floor.
    assert lru_recomputed(steps, shape.disk_chunks, drop_closed=False) >= 2 * floor
    # With room for everything ever seen, LRU too recomputes only the floor.
    assert lru_recomputed(steps, 10**6, drop_closed=False) == floor
