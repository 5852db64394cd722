"""The engine benchmark's default shape: plain LRU keeps dead chunks and loses live ones."""

from __future__ import annotations

from pathlib import Path

from bench.engine_bench import BLOCK_TURNS, blocks, floor_tokens
from bench.engine_lru import differing_turns, live_chunks_peak, lru_recomputed
from bench.engine_workload import CHUNK, TURN, Shape, engine_settings, schedule


def test_live_set_fits_the_disk_tier_only_if_dead_chunks_go() -> None:
    shape = Shape()
    steps = schedule(shape)
    peak = live_chunks_peak(steps)
    assert shape.ddr_chunks < peak <= shape.disk_chunks
    floor = floor_tokens(steps)
    # Dropping closed sessions' chunks leaves only the unavoidable recompute ...
    assert lru_recomputed(steps, shape.disk_chunks, drop_closed=True) == floor
    # ... while plain LRU evicts the paused sessions' contexts: well above the 2.5x target.
    assert lru_recomputed(steps, shape.disk_chunks, drop_closed=False) >= 2.9 * floor
    # With room for everything ever seen, LRU too recomputes only the floor.
    assert lru_recomputed(steps, 10**6, drop_closed=False) == floor
    # The tiers decide a good share of the turns, not a handful.
    turns = sum(s.kind == TURN for s in steps)
    assert differing_turns(steps, shape.disk_chunks) >= 0.4 * turns


def test_prompts_are_whole_chunks_and_fit_the_engine() -> None:
    shape = Shape()
    settings = engine_settings(shape, Path("/tmp/x"), 20000)
    for step in schedule(shape):
        if step.kind == TURN:
            assert len(step.prompt) % CHUNK == 0 and len(step.prompt) < settings.max_model_len
    assert settings.chunk_mib == 4.0 and settings.disk_odirect
    assert settings.ddr_gb * 1024 == shape.ddr_chunks * 4.0


def test_blocks_keep_every_step_in_order() -> None:
    steps = schedule(Shape(sessions=12))
    cut = blocks(steps)
    assert [s for b in cut for s in b] == steps
    assert all(sum(s.kind == TURN for s in b) == BLOCK_TURNS for b in cut[:-1])


def test_the_agent_order_gains_only_if_finished_sessions_close_soon() -> None:
    """bench.agent_lru: the agent client's order keeps the engine schedule's gain when the
    proxy closes a finished session before its next turn, and none when it waits for the
    idle close (the measured 1.00 before the run-end close)."""
    from bench.agent_lru import predict

    got = predict()
    assert got["at_once"] == {"steered": 92928, "gain": 2.972}
    assert got["late_when_second"]["gain"] > 2.5  # type: ignore[index]
    assert got["never"]["gain"] == 1.0  # type: ignore[index]
