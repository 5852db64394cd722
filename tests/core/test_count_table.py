"""The array-backed count table behaves as the dict it stands in for, under any sequence of
sets, deletes and pops, with hashes inside and outside its arrays."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ramakv_daemon.core.count_table import CountTable
from ramakv_daemon.core.packed import code_of

IN_ARRAYS = ["a", "-b", "7f", "0", "1d"]
HASHES = st.sampled_from([*IN_ARRAYS, "c0", "x", "0a", "h1"])  # the last four: the dict
OPS = st.lists(
    st.tuples(st.sampled_from(["set", "del", "pop", "setdefault"]), HASHES, st.integers(1, 5)),
    max_size=40,
)


def _table(start: dict[str, int]) -> CountTable:
    keys = sorted(code_of(h) for h in IN_ARRAYS)  # type: ignore[type-var]
    counts = array("i", [0] * len(keys))
    table = CountTable(array("q", keys), counts, {})
    for h, n in start.items():
        table[h] = n
    return table


@given(st.dictionaries(HASHES, st.integers(1, 5)), OPS)
def test_the_table_matches_a_dict(start: dict[str, int], ops: list[tuple[str, str, int]]) -> None:
    table, model = _table(start), dict(start)
    for op, h, n in ops:
        if op == "set":
            table[h] = n
            model[h] = n
        elif op == "setdefault":
            assert table.setdefault(h, n) == model.setdefault(h, n)
        elif op == "pop":
            assert table.pop(h, None) == model.pop(h, None)
        elif h in model:
            del table[h]
            del model[h]
        else:
            with pytest.raises(KeyError):
                del table[h]
        assert dict(table.items()) == model and table == model
        assert len(table) == len(model) and bool(table) == bool(model)
        for probe in [*IN_ARRAYS, "c0", "x", "0a", "h1", "zz"]:
            assert (probe in table) == (probe in model)
            assert table.get(probe, 0) == model.get(probe, 0)
        assert table.total() == sum(model.values())
        assert table.at_least(2) == {h for h, c in model.items() if c >= 2}
        assert sorted(table) == sorted(model) and sorted(table.values()) == sorted(model.values())


def test_missing_keys_raise_and_a_count_needs_a_key() -> None:
    table = _table({})
    with pytest.raises(KeyError):
        _ = table["a"]
    with pytest.raises(KeyError):
        table.pop("a")
    with pytest.raises(ValueError, match="one count per key"):
        CountTable(array("q", [1, 2]), array("i", [0]))


def test_a_full_slot_cache_is_emptied_and_answers_stay_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Slots are remembered by hash (each event looks its hashes up several times); past
    SLOT_CACHE entries the cache starts again, and every answer still matches a dict."""
    from ramakv_daemon.core import count_table

    monkeypatch.setattr(count_table, "SLOT_CACHE", 3)
    table, model = _table({}), {}
    for round_ in range(3):
        for n, h in enumerate([*IN_ARRAYS, "c0", "x"], start=1):
            table[h] = n + round_
            model[h] = n + round_
            assert len(table._slots) <= 3
        for h in [*IN_ARRAYS, "c0", "x", "0a"]:
            assert table.get(h) == model.get(h)
    del table["a"]
    del model["a"]
    assert "a" not in table and dict(table.items()) == model
