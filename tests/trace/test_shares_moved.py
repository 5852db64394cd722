"""The trace delta's shared_changed test in C (flags compared per chunk) answers as the
per-chunk rule it replaced, with and without parked chunks and open forks."""

from __future__ import annotations

from array import array
from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st

from ramakv_daemon.core.count_table import CountTable
from ramakv_daemon.core.packed import code_of
from ramakv_daemon.trace.protocol import moved_between, shares_moved

HASHES = [f"h{i}" for i in range(8)]
COUNTS = st.dictionaries(st.sampled_from(HASHES), st.integers(0, 5))


def _rule(
    before: Mapping[str, int], counts: Mapping[str, int], parked: Mapping[str, int], forks: int
) -> bool:
    """The rule as first written: one chunk at a time."""
    for h, old in before.items():
        new = counts.get(h, 0)
        lo, hi = (old, new) if old < new else (new, old)
        if lo == hi:
            continue
        if lo <= 1 < hi or (lo == 0 and h in parked) or (forks and hi >= 3 and lo <= forks + 1):
            return True
    return False


PARKED = st.dictionaries(st.sampled_from(HASHES), st.integers(1, 3))


@given(COUNTS, COUNTS, PARKED, st.integers(0, 3))
def test_same_answer_as_the_per_chunk_rule(
    before: dict[str, int], counts: dict[str, int], parked: dict[str, int], forks: int
) -> None:
    expected = _rule(before, counts, parked, forks)
    assert shares_moved(before, counts, parked, forks) is expected
    now = [counts.get(h, 0) for h in before]
    assert moved_between(before, now, parked, forks) is expected


def test_a_turn_that_moves_no_share() -> None:
    """A turn_end's usual delta: private chunks 0 -> 1 and 1 -> 0, shared ones unchanged."""
    before = {"a": 0, "b": 1, "s": 256, "k": 1}
    counts = {"a": 1, "s": 256, "k": 1}
    assert not shares_moved(before, counts, {}, 0)
    assert shares_moved(before, counts, {"b": 1}, 0)  # a suspended map lists b: 1 -> 0
    assert shares_moved(before, {**counts, "k": 2}, {}, 0)  # k crosses 1 -> 2


def test_a_restarted_parked_table_answers_as_a_dict() -> None:
    """After a restart with suspended packed maps the parked table is a CountTable (no
    keys view): the screen still answers, as it does for a dict (a turn_end's record used
    to fail there)."""
    codes = sorted(c for c in (code_of(h) for h in ("b", "c0", "-3")) if c is not None)
    parked = CountTable(array("q", codes), array("i", [1, 0, 2]), {})
    before = {"a": 0, "b": 1, "s": 256}
    counts = {"a": 1, "s": 256}
    now = [counts.get(h, 0) for h in before]
    table = dict(parked.items())
    for p in (parked, table):
        assert moved_between(before, now, p, 0) is _rule(before, counts, table, 0)
    assert not moved_between({"a": 0}, [1], parked, 0)
