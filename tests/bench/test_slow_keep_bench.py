"""bench.slow_keep on a short run: both sides measure unrelated turn_ends and the
re-referencing session's waits (counts only; the figures are the benchmark's)."""

from bench import slow_keep


def test_both_sides_measure_what_the_table_shows() -> None:
    res = slow_keep.run(seconds=2.0, sessions=2, keep_delay=0.2)
    for side in ("prompt", "slow"):
        assert res[side]["turn_ends"] > 0, res
        assert res[side]["rereference_waits"] >= 1, res
    assert "others' p99, slow / prompt" in slow_keep.table(res)
