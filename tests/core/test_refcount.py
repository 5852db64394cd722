"""RefcountTable: the batch path and the repeated-hash path agree, and failures change nothing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ramakv_daemon.core.refcount import RefcountTable

HASHES = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=8)


def _shared(table: RefcountTable) -> set[str]:
    return {h for h, n in table.as_dict().items() if n >= 2}


def _model_incr(model: dict[str, int], hashes: list[str]) -> None:
    for h in hashes:
        model[h] = model.get(h, 0) + 1


@given(start=HASHES, add=HASHES, drop=HASHES)
def test_incr_decr_match_one_at_a_time_model(
    start: list[str], add: list[str], drop: list[str]
) -> None:
    table, model = RefcountTable(), {}
    table.incr(start, {})
    _model_incr(model, start)
    changed: dict[str, int] = {}
    table.incr(add, changed)
    _model_incr(model, add)
    assert table.as_dict() == model
    assert table.shared == _shared(table)
    before = table.as_dict()
    need: dict[str, int] = {}
    for h in drop:
        need[h] = need.get(h, 0) + 1
    if any(model.get(h, 0) < n for h, n in need.items()):
        changed_before, total = dict(changed), table.total_references()
        with pytest.raises(ValueError, match="underflow"):
            table.decr(drop, changed)
        # A refused decrement changes nothing: the counts, the shared set, the total and
        # the undo record (its partial work is rolled back, not checked up front).
        assert table.as_dict() == before
        assert table.shared == _shared(table)
        assert table.total_references() == total
        assert changed == changed_before and list(changed) == list(changed_before)
        return
    zeros = table.decr(drop, changed)
    for h in drop:
        model[h] -= 1
    assert sorted(zeros) == sorted(h for h in need if model[h] == 0)
    assert table.as_dict() == {h: n for h, n in model.items() if n}
    assert table.shared == _shared(table)
    table.restore(changed)  # undo both steps: back to the state after `start`
    expect: dict[str, int] = {}
    _model_incr(expect, start)
    assert table.as_dict() == expect
    assert table.shared == _shared(table)


def test_replace_all_finds_the_shared_chunks() -> None:
    table = RefcountTable()
    table.replace_all({"a": 1, "b": 2, "c": 7})
    assert table.shared == {"b", "c"} and table.total_references() == 10


def test_changed_keeps_the_first_previous_count() -> None:
    table = RefcountTable()
    table.incr(["a"], {})
    changed: dict[str, int] = {}
    table.decr(["a"], changed)
    table.incr(["a", "b"], changed)
    assert changed == {"a": 1, "b": 0}
