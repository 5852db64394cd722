"""A packed map's shared_count counted in a count table's arrays with numpy equals the
per-hash count it replaces, for hashes in the arrays, in its dict and in neither."""

from __future__ import annotations

import random
from array import array

from hypothesis import given
from hypothesis import strategies as st

from ramakv_daemon.core.count_table import CountTable
from ramakv_daemon.core.packed import PackedMap, code_of, text_of
from ramakv_daemon.core.session import Session
from ramakv_daemon.trace.protocol import shared_count
from ramakv_daemon.trace.shared_counts import counted_above

IN_ARRAYS = ["a", "-b", "7f", "0", "1d", "-7fff"]
LATER = ["c0", "-3", "fe"]  # canonical, first counted after the load: the table's dict
ALL = IN_ARRAYS + LATER + ["77"]  # "77": counted nowhere


def _table(counts: dict[str, int]) -> CountTable:
    keys = sorted(code_of(h) for h in IN_ARRAYS)  # type: ignore[type-var]
    table = CountTable(array("q", keys), array("i", [0] * len(keys)), {})
    for h, n in counts.items():
        table[h] = n
    return table


@given(
    st.dictionaries(st.sampled_from(IN_ARRAYS + LATER), st.integers(1, 4)),
    st.lists(st.sampled_from(ALL), min_size=1, max_size=12),
    st.booleans(),
)
def test_the_arrays_count_as_the_loop_did(
    counts: dict[str, int], hashes: list[str], suspended: bool
) -> None:
    own = 0 if suspended else 1
    for h in set(hashes):  # an active map holds a reference on each of its chunks
        if own:
            counts[h] = counts.get(h, 0) + 1
    table = _table(counts)
    packed = PackedMap.of(hashes)
    assert packed is not None
    s = Session("s", packed, suspended=suspended)
    as_text = Session("s", tuple(hashes), suspended=suspended)
    expected = sum(1 for h in set(hashes) if counts.get(h, 0) > own)
    assert shared_count(s, table) == expected  # the numpy path
    assert shared_count(as_text, dict(counts)) == expected  # the per-hash path


def test_an_empty_table_counts_nothing() -> None:
    table = CountTable(array("q"), array("i"), {})
    packed = PackedMap.of(["a", "b"])
    assert packed is not None
    assert shared_count(Session("s", packed, suspended=True), table) == 0


@given(st.randoms(use_true_random=False), st.booleans())
def test_many_blocks_of_keys_count_as_a_dict_would(rnd: random.Random, suspended: bool) -> None:
    codes = sorted({rnd.randrange(-(2**63), 2**63) for _ in range(200)})
    counts = array("i", [rnd.randrange(0, 3) for _ in codes])
    table = CountTable(array("q", codes), counts, {})
    strangers = [rnd.randrange(-(2**63), 2**63) for _ in range(20)]  # in no array
    picked = rnd.sample(codes, min(40, len(codes))) + strangers + [codes[0], codes[-1], codes[-1]]
    packed = PackedMap.of([text_of(c) for c in picked])
    assert packed is not None
    by_code = dict(zip(codes, counts, strict=True))
    own = 0 if suspended else 1
    expected = sum(1 for c in set(picked) if by_code.get(c, 0) > own)
    assert counted_above(packed, table, own) == expected
