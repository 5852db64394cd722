"""A packed map's shared_count counted in a count table's arrays with numpy equals the
per-hash count it replaces, for hashes in the arrays, in its dict and in neither."""

from __future__ import annotations

import random
from array import array

from hypothesis import given
from hypothesis import strategies as st

from ramakv_daemon.core.count_table import CountTable
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.packed import PackedMap, code_of, text_of
from ramakv_daemon.core.session import Session
from ramakv_daemon.trace.protocol import shared_count
from ramakv_daemon.trace.shared_counts import counted_above, counts_above, suspended_counts

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


@given(st.randoms(use_true_random=False), st.integers(0, 2))
def test_many_maps_at_once_count_as_one_at_a_time(rnd: random.Random, own: int) -> None:
    """One bulk pass over several maps (repeats inside a map, chunks shared between maps)
    gives each map the count the per-hash loop does."""
    codes = sorted({rnd.randrange(-(2**63), 2**63) for _ in range(300)})
    counts = array("i", [rnd.randrange(0, 4) for _ in codes])
    table = CountTable(array("q", codes), counts, {})
    table.code_filter()  # built before the later hashes: they must still be found
    later = [rnd.randrange(-(2**63), 2**63) for _ in range(10)]
    for c in later:
        table[text_of(c)] = rnd.randrange(1, 4)
    gone = text_of(later[0])
    del table[gone]  # counted, then dropped: absent again
    pool = codes + later + [rnd.randrange(-(2**63), 2**63) for _ in range(10)]
    maps = []
    for _ in range(rnd.randrange(1, 6)):
        picked = [rnd.choice(pool) for _ in range(rnd.randrange(1, 30))]
        packed = PackedMap.of([text_of(c) for c in picked + picked[:3]])
        assert packed is not None
        maps.append(packed)
    expected = [sum(1 for h in set(m) if table.get(h, 0) > own) for m in maps]
    assert counts_above(maps, table, own) == expected
    assert [counted_above(m, table, own) for m in maps] == expected


def test_the_filter_has_no_false_negatives_for_any_spelling() -> None:
    """Small codes (tests, other engines) share the filter's top bits: found all the same."""
    codes = list(range(-5, 600, 3))
    table = CountTable(array("q", codes), array("i", [1] * len(codes)), {})
    table["-7"] = 2  # not a key: the dict
    packed = PackedMap.of([text_of(c) for c in range(-8, 600)])
    assert packed is not None
    assert counts_above([packed], table, 0) == [len(codes) + 1]
    assert counts_above([packed], table, 1) == [1]


@given(st.randoms(use_true_random=False))
def test_bulk_counts_of_a_group_match_shared_count(rnd: random.Random) -> None:
    """suspended_counts answers for the suspended packed sessions without open forks, and
    only for them, what shared_count answers one session at a time."""
    codes = sorted({rnd.randrange(-(2**63), 2**63) for _ in range(100)})
    table = CountTable(array("q", codes), array("i", [rnd.randrange(0, 3) for _ in codes]), {})
    group: list[Session | None] = [None]
    for i in range(8):
        hashes = [text_of(rnd.choice(codes)) for _ in range(rnd.randrange(1, 12))]
        packed = PackedMap.of(hashes)
        assert packed is not None
        chunks = packed if i % 3 else tuple(hashes)  # a tuple map: left to shared_count
        group.append(Session(f"s{i}", chunks, suspended=rnd.random() < 0.7))
    forks = {"s1": [Fork(1, "s1", ("a",), 0.0)]}
    known = suspended_counts(group, table, forks)
    for i, s in enumerate(group):
        wanted = (
            s is not None
            and s.suspended
            and isinstance(s.chunk_hashes, PackedMap)
            and s.session_id not in forks
        )
        assert (i in known) == wanted
        if s is not None and wanted:
            assert known[i] == shared_count(s, table, forks.get(s.session_id, []))
    assert suspended_counts(group, dict(table.items()), forks) == {}  # a plain dict table


def test_one_map_alone_builds_no_read_index() -> None:
    """An event's record counts one suspended map: it must not pay for the table's read
    indexes (a bulk read builds them, and from then on every count uses them)."""
    codes = list(range(0, 4000, 7))
    table = CountTable(array("q", codes), array("i", [1] * len(codes)), {})
    table["-5"] = 1  # the dict
    packed = PackedMap.of([text_of(c) for c in range(-6, 50)])
    assert packed is not None
    assert counted_above(packed, table, 0) == 8 + 1
    assert not table.indexed
    assert counts_above([packed, packed], table, 0) == [9, 9]
    assert table.indexed
    assert counted_above(packed, table, 0) == 9
