"""bench.order_hint on a short run: every op is timed at every size and the table shows the
fitted costs (counts only; the figures are the benchmark's)."""

import pytest

pytest.importorskip("lmcache")
pytestmark = pytest.mark.lmcache

from bench import order_hint  # noqa: E402


def test_every_op_has_a_median_per_size_and_a_slope() -> None:
    res = order_hint.run(sizes=(2, 8), reps=1)
    assert set(res["ops"]) == set(order_hint.OPS)
    for r in res["ops"].values():
        assert set(r["median_us"]) == {"2", "8"} and all(v > 0 for v in r["median_us"].values())
        assert isinstance(r["us_per_chunk"], float)
    assert "µs per chunk (slope)" in order_hint.table(res)
